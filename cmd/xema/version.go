package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/buildinfo"
)

// newVersionCmd is `xema version`.
func newVersionCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the module version and the commit xema was built from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := buildinfo.Read()
			switch format {
			case "text":
				fmt.Fprintln(cmd.OutOrStdout(), in.String())
			case "json":
				return json.NewEncoder(cmd.OutOrStdout()).Encode(in)
			default:
				return &exitError{code: 2, err: fmt.Errorf("--format %q: want text or json", format)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "text or json")
	return cmd
}
