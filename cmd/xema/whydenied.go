package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/metatool"
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

type denial struct {
	audit.Denial
	Reasons     []reason         `json:"reasons"`
	Suggestions []map[string]any `json:"suggestions"`
}

// advice says in words what a suggestion asks the caller to do.
func advice(s map[string]any) string {
	str := func(k string) string { v, _ := s[k].(string); return v }
	switch str("kind") {
	case "request-grant":
		return fmt.Sprintf("ask an org admin to grant %s in environment %s", str("capability"), str("environment"))
	case "switch-environment":
		return fmt.Sprintf("call from environment %s instead of %s", str("to"), str("from"))
	case "request-approval":
		return fmt.Sprintf("ask for a human approval of %s", str("capability"))
	case "request-role":
		return fmt.Sprintf("ask for org role %s (it holds %s without a grant)", str("role"), str("capability"))
	case "use-successor":
		return fmt.Sprintf("call %s instead", str("successor"))
	}
	raw, _ := json.Marshal(s)
	return string(raw)
}

func printDenial(w io.Writer, d denial) {
	fmt.Fprintf(w, "%s (%s) was denied %s in environment %s (audit %s).\n",
		printable(d.Subject.Ref), printable(d.Subject.Kind), printable(d.Capability), printable(d.Environment), printable(d.AuditID))
	fmt.Fprintln(w, "\nWhy:")
	for _, r := range d.Reasons {
		fmt.Fprintf(w, "  - %s: %s\n", printable(r.Code), printable(r.Detail))
	}
	steps := make([]string, 0, len(d.Suggestions)+len(d.Reasons))
	for _, s := range d.Suggestions {
		steps = append(steps, advice(s))
	}
	for _, r := range d.Reasons {
		switch {
		case r.Code == gateway.CodeRateLimited || r.Code == gateway.CodeQuotaExceeded:
			steps = append(steps, fmt.Sprintf("wait and retry: %s (the call's answer carries Retry-After)", r.Detail))
		case len(d.Suggestions) == 0 && metatool.GrantLiftable(r.Code):
			steps = append(steps, fmt.Sprintf("ask an org admin for a wider grant: POST /v1/capabilities/explain with capabilityRef %s and denialCode %s names it", d.Capability, r.Code))
		}
	}
	if len(steps) == 0 {
		fmt.Fprintln(w, "\nNo grant, role or change of environment would allow this call.")
		return
	}
	fmt.Fprintln(w, "\nWhat to do next:")
	for _, s := range steps {
		fmt.Fprintf(w, "  - %s\n", printable(s))
	}
}
