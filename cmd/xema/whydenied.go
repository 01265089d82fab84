package main

import (
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/explain"
)

// newWhyDeniedCmd is `xema why-denied`.
func newWhyDeniedCmd() *cobra.Command {
	var (
		api    adminFlags
		format string
	)
	cmd := &cobra.Command{
		Use:   "why-denied AUDIT_ID",
		Short: "Explain a denial: its reasons in words and what to do next",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			var d denial
			if err := c.Do(cmd.Context(), "GET", "/v1/audit/"+url.PathEscape(args[0])+"/why-denied", nil, &d); err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), d)
			}
			printDenial(cmd.OutOrStdout(), d)
			return nil
		},
	}
	api.add(cmd)
	cmd.Flags().StringVar(&format, "format", "text", "text or json")
	return cmd
}

type reason struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// denial is why-denied's answer: the audited denial, explained by the gateway (package
// explain), whose next steps are printed as they are, so the CLI, the console, explain and the
// call's own answer say the same.
type denial struct {
	explain.Denial
	Reasons []reason `json:"reasons"`
}

func printDenial(w io.Writer, d denial) {
	fmt.Fprintf(w, "%s (%s) was denied %s in environment %s (audit %s).\n",
		printable(d.Subject.Ref), printable(d.Subject.Kind), printable(d.Capability), printable(d.Environment), printable(d.AuditID))
	fmt.Fprintln(w, "\nWhy:")
	for _, r := range d.Reasons {
		fmt.Fprintf(w, "  - %s: %s\n", printable(r.Code), printable(r.Detail))
	}
	if len(d.Next) == 1 && d.Next[0] == explain.Nothing {
		fmt.Fprintln(w, "\n"+explain.Nothing)
		return
	}
	if len(d.Next) > 0 { // a gateway before explanations sends none
		fmt.Fprintln(w, "\nWhat to do next:")
	}
	for _, s := range d.Next {
		fmt.Fprintf(w, "  - %s\n", printable(s))
	}
	for _, p := range d.Permissions {
		fmt.Fprintf(w, "\nThe grant that would allow it: %s for %s in %s (biome %s@%s).\n", printable(p.Capability),
			printable(strings.Join(p.Subjects, ", ")), printable(strings.Join(p.Environments, ", ")), printable(p.BiomeID), printable(p.BiomeVersion))
	}
}
