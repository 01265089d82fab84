package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/store/engine"
)

func newMigrateCmd() *cobra.Command {
	var dsn, dataDir string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending schema migrations to the store",
		Long: `Applies the SQL migrations the store has not recorded yet, each in its own transaction,
and prints the versions it applied. Running it again applies nothing. 'xema serve' applies
them at start as well.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			applied, err := engine.Migrate(cmd.Context(), storeDSN(dsn), dataDir)
			for _, v := range applied {
				fmt.Fprintln(cmd.OutOrStdout(), "applied", v)
			}
			if err != nil {
				return fmt.Errorf("migrate: %w", err)
			}
			if len(applied) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "up to date:", engine.Describe(storeDSN(dsn), dataDir))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dsn, "store", "", "store: empty for SQLite under --data-dir, sqlite:PATH, or postgres://... (also XEMA_STORE)")
	f.StringVar(&dataDir, "data-dir", ".xema", "directory of the embedded SQLite store")
	return cmd
}
