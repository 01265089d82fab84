package main

import (
	"fmt"
	"net/http"
	"net/url"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/approval"
)

// newApprovalsCmd is `xema approvals`.
func newApprovalsCmd() *cobra.Command {
	var (
		api    adminFlags
		format string
	)
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List, approve and reject calls held for a person's approval",
	}
	api.addTo(cmd.PersistentFlags())
	cmd.PersistentFlags().StringVar(&format, "format", "text", "text or json")

	var filter struct{ status, biome, ref, requester string }
	list := &cobra.Command{
		Use:   "list",
		Short: "List held calls, newest first (org administrators)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			q := queryOf(map[string]string{"status": filter.status, "biome": filter.biome, "ref": filter.ref, "requester": filter.requester})
			path := "/v1/approvals"
			if len(q) > 0 {
				path += "?" + q.Encode()
			}
			var out struct {
				Approvals []approval.View `json:"approvals"`
			}
			if err := c.Do(cmd.Context(), http.MethodGet, path, nil, &out); err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "APPROVAL\tSTATUS\tREF\tREQUESTER\tENVIRONMENT\tEXPIRES")
			for _, a := range out.Approvals {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", printable(a.ApprovalID), printable(a.Status),
					printable(a.Ref), printable(a.Requester), printable(a.Environment), a.ExpiresAt)
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&filter.status, "status", "", "only this status (pending, approved, rejected, expired, running, done, failed)")
	list.Flags().StringVar(&filter.biome, "biome", "", "only calls for this biome")
	list.Flags().StringVar(&filter.ref, "ref", "", "only calls of this capability ref")
	list.Flags().StringVar(&filter.requester, "requester", "", "only calls of this subject (e.g. agent:support-bot)")

	decide := func(verb string, body func([]string) any) *cobra.Command {
		return &cobra.Command{
			Use:  verb + " APPROVAL_ID",
			Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := api.client()
				if err != nil {
					return err
				}
				var v approval.View
				path := "/v1/approvals/" + url.PathEscape(args[0]) + "/" + verb
				if err := c.Do(cmd.Context(), http.MethodPost, path, body(args), &v); err != nil {
					return err
				}
				if format == "json" {
					return writeJSON(cmd.OutOrStdout(), v)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s", printable(v.ApprovalID), printable(v.Ref), printable(v.Status))
				if v.Outcome != "" {
					fmt.Fprintf(cmd.OutOrStdout(), " (outcome %s)", printable(v.Outcome))
				}
				fmt.Fprintln(cmd.OutOrStdout())
				return nil
			},
		}
	}
	approve := decide("approve", func([]string) any { return map[string]any{} })
	approve.Short = "Approve a held call: it then runs once, as its requester"
	var reason string
	reject := decide("reject", func([]string) any { return map[string]string{"reason": reason} })
	reject.Short = "Reject a held call with a reason: it never runs"
	reject.Flags().StringVar(&reason, "reason", "", "why the call is rejected (required)")
	_ = reject.MarkFlagRequired("reason")

	cmd.AddCommand(list, approve, reject)
	return cmd
}
