package main

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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

	var filter struct {
		status, biome, ref, requester, cursor string
		limit                                 int
		all                                   bool
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List held calls, newest first, a page at a time (org administrators); --all follows every page",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			var out approval.Page
			cursor := filter.cursor
			for {
				q := queryOf(map[string]string{"status": filter.status, "biome": filter.biome, "ref": filter.ref,
					"requester": filter.requester, "cursor": cursor})
				if filter.limit > 0 {
					q.Set("limit", strconv.Itoa(filter.limit))
				}
				path := "/v1/approvals"
				if len(q) > 0 {
					path += "?" + q.Encode()
				}
				var page approval.Page
				if err := c.Do(cmd.Context(), http.MethodGet, path, nil, &page); err != nil {
					return err
				}
				out.Approvals, out.NextCursor = append(out.Approvals, page.Approvals...), page.NextCursor
				if !filter.all || page.NextCursor == "" {
					break
				}
				cursor = page.NextCursor
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "APPROVAL\tSTATUS\tREF\tREQUESTER\tENVIRONMENT\tEXPIRES\tYOU MAY DECIDE")
			for _, a := range out.Approvals {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", printable(a.ApprovalID), printable(a.Status),
					printable(a.Ref), printable(a.Requester), printable(a.Environment), printable(a.ExpiresAt), printable(mayDecide(a)))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if out.NextCursor != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "more: --cursor %s (or --all)\n", printable(out.NextCursor))
			}
			return nil
		},
	}
	list.Flags().StringVar(&filter.status, "status", "", "only this status (pending, approved, rejected, expired, running, dispatched, done, failed, interrupted, withdrawn)")
	list.Flags().StringVar(&filter.biome, "biome", "", "only calls for this biome")
	list.Flags().StringVar(&filter.ref, "ref", "", "only calls of this capability ref")
	list.Flags().StringVar(&filter.requester, "requester", "", "only calls of this subject (e.g. agent:support-bot)")
	list.Flags().StringVar(&filter.cursor, "cursor", "", "start at this page (the nextCursor a listing printed)")
	list.Flags().IntVar(&filter.limit, "limit", 0, "calls per page, 1-100 (default 50)")
	list.Flags().BoolVar(&filter.all, "all", false, "follow every page: list every matching call")

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

// mayDecide is the listing's column saying whether the viewer may decide a call, and if not
// why (the code; --format json has the whole reason).
func mayDecide(v approval.View) string {
	switch {
	case v.CanDecide != nil && *v.CanDecide:
		return "yes"
	case v.WhyNot != nil && len(v.WhyNot.Reasons) > 0:
		missing := make([]string, len(v.WhyNot.Reasons))
		for i, r := range v.WhyNot.Reasons {
			missing[i] = cmp.Or(r.Detail, r.Code)
		}
		return "no: " + v.WhyNot.Code + " (" + strings.Join(missing, "; ") + ")"
	case v.WhyNot != nil:
		return "no: " + v.WhyNot.Code
	}
	return "-"
}
