package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/store/engine"
)

// errPostgresBackup points at PostgreSQL's own tools, which copy a database consistently.
var errPostgresBackup = errors.New("the store is PostgreSQL: back it up with pg_dump --format=custom and restore it with pg_restore (docs/operations.md, Backup and restore)")

// newBackupCmd is `xema backup`.
func newBackupCmd() *cobra.Command {
	var sf storeFlags
	var to string
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Copy the embedded store consistently while the gateway serves (restore with xema restore)",
		Long: `backup writes a consistent copy of the embedded SQLite store to --to (a new file) while the
gateway keeps serving: SQLite's VACUUM INTO reads one snapshot without blocking the gateway's
writes. The copy holds the deployment's keys wrapped by the master key: keep the master key
(DATA_DIR/master.key or your --master-key-file) and DATA_DIR/secret.key apart from it; a restore
needs both. For PostgreSQL use pg_dump/pg_restore (docs/operations.md).`,
		Example: `  xema backup --data-dir .xema --to /backups/xema-$(date +%F).db`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return &exitError{code: 2, err: errors.New("--to: name the backup file to write")}
			}
			path, err := engine.SQLitePath(storeDSN(sf.dsn), sf.dataDir)
			if errors.Is(err, engine.ErrNotSQLite) {
				return &exitError{code: 2, err: errPostgresBackup}
			}
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			if err := engine.Backup(cmd.Context(), path, to); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backed up %s to %s\n", path, to)
			return nil
		},
	}
	sf.add(cmd)
	cmd.Flags().StringVar(&to, "to", "", "the backup file to write (must not exist)")
	return cmd
}

// newRestoreCmd is `xema restore`.
func newRestoreCmd() *cobra.Command {
	var sf storeFlags
	var from string
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Restore a backup of the embedded store into a fresh data directory",
		Long: `restore checks the integrity of --from (a file written by xema backup) and copies it to the
store of --data-dir, which must not exist: a restore never overwrites a store. Put the
deployment's master key and secret.key in place too, then start the gateway and run
xema audit verify.`,
		Example: `  xema restore --from /backups/xema-2026-12-01.db --data-dir /var/lib/xema-restored`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" {
				return &exitError{code: 2, err: errors.New("--from: name the backup file to restore")}
			}
			path, err := engine.SQLitePath(storeDSN(sf.dsn), sf.dataDir)
			if errors.Is(err, engine.ErrNotSQLite) {
				return &exitError{code: 2, err: errPostgresBackup}
			}
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			if err := engine.Restore(cmd.Context(), from, path); err != nil {
				return &exitError{code: 2, err: err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s to %s\n", from, path)
			return nil
		},
	}
	sf.add(cmd)
	cmd.Flags().StringVar(&from, "from", "", "the backup file to restore")
	return cmd
}
