package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/manifest"
)

func init() {
	var api adminFlags
	cmd := &cobra.Command{
		Use:   "submit DIR",
		Short: "Submit a biome version to a gateway and print its permission digest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			dir := args[0]
			if _, problems, err := manifest.LoadDir(dir); err != nil {
				return &exitError{code: 2, err: err}
			} else if len(problems) > 0 {
				for _, p := range problems {
					fmt.Fprintln(cmd.ErrOrStderr(), p.String())
				}
				return &exitError{code: 1, err: fmt.Errorf("%s: %d problem(s); nothing submitted", dir, len(problems))}
			}
			sub, err := readSubmission(dir)
			if err != nil {
				return err
			}
			var out json.RawMessage
			if err := c.Do(cmd.Context(), "POST", "/v1/biomes", sub, &out); err != nil {
				return err
			}
			return writeJSON(cmd.OutOrStdout(), out)
		},
	}
	api.add(cmd)
	biomeCmd.AddCommand(cmd)
}

// readSubmission sends the files as written: the gateway validates them again.
func readSubmission(dir string) (catalog.Submission, error) {
	var sub catalog.Submission
	raw, err := os.ReadFile(filepath.Join(dir, "biome.json"))
	if err != nil {
		return sub, err
	}
	sub.Manifest = raw
	files, err := filepath.Glob(filepath.Join(dir, "contributions", "*.capability.contribution.json"))
	if err != nil {
		return sub, err
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return sub, err
		}
		sub.Contributions = append(sub.Contributions, raw)
	}
	if sub.Contributions == nil {
		sub.Contributions = []json.RawMessage{}
	}
	return sub, nil
}
