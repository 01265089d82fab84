package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/manifest"
)

// newBiomeCmd is `xema biome`.
func newBiomeCmd() *cobra.Command {
	var format string
	lint := &cobra.Command{
		Use:   "lint DIR",
		Short: "Check a biome directory against the biome and contribution schemas",
		Long: `Check biome.json and contributions/*.capability.contribution.json in DIR.

Exit status: 0 when the biome is valid (a one-line summary is printed), 1 when it has
problems (each printed as FILE: POINTER: MESSAGE, or a JSON array of {file, path, message}
with --format json), 2 on a usage error or an unreadable DIR.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitError{code: 2, err: fmt.Errorf("biome lint takes exactly one DIR, got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return &exitError{code: 2, err: fmt.Errorf("--format must be text or json, got %q", format)}
			}
			return runLint(cmd.OutOrStdout(), args[0], format)
		},
	}
	lint.Flags().StringVar(&format, "format", "text", "output format: text or json")
	lint.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: 2, err: err}
	})
	biomeCmd := &cobra.Command{Use: "biome", Short: "Author, check and submit biomes"}
	biomeCmd.AddCommand(lint, newBiomeInitCmd(), newBiomeListCmd(), newBiomeSubmitCmd())
	return biomeCmd
}

func runLint(out io.Writer, dir, format string) error {
	b, problems, err := manifest.LoadDir(dir)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if len(problems) == 0 {
		if format == "json" {
			return writeJSON(out, []manifest.Problem{})
		}
		_, err := fmt.Fprintf(out, "%s %s: valid, %d capabilities (%d contributed)\n", b.ID, b.Version, len(b.RequiresCapabilities), len(b.Contributions))
		return err
	}
	if format == "json" {
		if err := writeJSON(out, problems); err != nil {
			return err
		}
	} else {
		for _, p := range problems {
			if _, err := fmt.Fprintln(out, p.String()); err != nil {
				return fmt.Errorf("write problems: %w", err)
			}
		}
	}
	return &exitError{code: 1, err: fmt.Errorf("%s: %d problem(s)", dir, len(problems))}
}
