package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// newBiomeListCmd is `xema biome list`.
func newBiomeListCmd() *cobra.Command {
	var (
		api     adminFlags
		format  string
		biomeID string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the biome versions your org may install, newest first, with their digest",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			path := "/v1/biomes"
			if biomeID != "" {
				path += "?biomeId=" + url.QueryEscape(biomeID)
			}
			var out struct {
				Biomes []struct {
					BiomeID   string `json:"biomeId"`
					Version   string `json:"version"`
					Operator  bool   `json:"operator"`
					CreatedAt string `json:"createdAt"`
					Digest    struct {
						Hash     string `json:"hash"`
						RiskTier string `json:"riskTier"`
					} `json:"digest"`
				} `json:"biomes"`
			}
			var raw json.RawMessage
			if err := c.Do(cmd.Context(), http.MethodGet, path, nil, &raw); err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), raw)
			}
			if err := json.Unmarshal(raw, &out); err != nil {
				return fmt.Errorf("decode biome list: %w", err)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "BIOME\tVERSION\tRISK\tDIGEST\tSTORE\tSUBMITTED")
			for _, b := range out.Biomes {
				store := "org"
				if b.Operator {
					store = "operator"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", printable(b.BiomeID), printable(b.Version), printable(b.Digest.RiskTier),
					printable(b.Digest.Hash), store, b.CreatedAt)
			}
			return tw.Flush()
		},
	}
	api.add(cmd)
	cmd.Flags().StringVar(&format, "format", "text", "text or json")
	cmd.Flags().StringVar(&biomeID, "biome", "", "only versions of this biome")
	return cmd
}
