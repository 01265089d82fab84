package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/policy"
)

// newBundleCmd is `xema bundle`.
func newBundleCmd() *cobra.Command {
	var out, dataFile, revision, extraDir string
	build := &cobra.Command{
		Use:   "build -o FILE [--data FILE]",
		Short: "Write an OPA bundle of the policies and a data.xema document",
		Long: "Writes the bundle a stock `opa run --server` can load: the Rego of policies/ (and of\n" +
			"--policy-dir), and data.xema from --data (a JSON object in the layout of\n" +
			"docs/policy-data.md) or, without --data, no grants at all.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return &exitError{code: 2, err: fmt.Errorf("bundle build: -o FILE is required")}
			}
			raw := []byte(`{"environments": {}, "profiles": {}, "capabilities": {}, "grants": {}}`)
			if dataFile != "" {
				b, err := os.ReadFile(dataFile)
				if err != nil {
					return fmt.Errorf("bundle build: %w", err)
				}
				raw = b
			}
			var data map[string]any
			if err := json.Unmarshal(raw, &data); err != nil {
				return &exitError{code: 2, err: fmt.Errorf("bundle build: %s: not a JSON object: %w", dataFile, err)}
			}
			if revision == "" {
				sum := sha256.Sum256(raw)
				revision = "sha256:" + hex.EncodeToString(sum[:8])
			}
			e, err := policy.New(cmd.Context(), policy.Options{ExtraDir: extraDir})
			if err != nil {
				return fmt.Errorf("bundle build: %w", err)
			}
			if err := e.Load(cmd.Context(), data, revision); err != nil {
				return fmt.Errorf("bundle build: %w", err)
			}
			tarGz, _ := e.Bundle()
			if err := os.WriteFile(out, tarGz, 0o644); err != nil {
				return fmt.Errorf("bundle build: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (revision %s, %d bytes)\n", out, revision, len(tarGz))
			return nil
		},
	}
	build.Flags().StringVarP(&out, "output", "o", "", "bundle file to write (.tar.gz)")
	build.Flags().StringVar(&dataFile, "data", "", "JSON file holding the data.xema document")
	build.Flags().StringVar(&revision, "revision", "", "bundle revision (default: a hash of the data)")
	build.Flags().StringVar(&extraDir, "policy-dir", "", "platform Rego (package xema.custom) to include")
	cmd := &cobra.Command{Use: "bundle", Short: "Build OPA bundles"}
	cmd.AddCommand(build)
	return cmd
}
