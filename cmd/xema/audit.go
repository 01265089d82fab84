package main

import (
	"fmt"
	"net/http"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/audit"
)

// newAuditCmd is `xema audit`.
func newAuditCmd() *cobra.Command {
	var (
		api    adminFlags
		format string
		f      struct{ ref, subject, decision, reason, since, until, cursor string }
		limit  int
		all    bool
	)
	search := &cobra.Command{
		Use:   "search",
		Short: "Search the audit log of your org, newest first (administrators: every subject's; others: your own)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			q := queryOf(map[string]string{"ref": f.ref, "subject": f.subject, "decision": f.decision,
				"reason": f.reason, "since": f.since, "until": f.until, "cursor": f.cursor})
			if limit != 0 {
				q.Set("limit", strconv.Itoa(limit))
			}
			var page struct {
				Records    []audit.Record `json:"records"`
				NextCursor string         `json:"nextCursor"`
			}
			var records []audit.Record
			for {
				if err := c.Do(cmd.Context(), http.MethodGet, "/v1/audit?"+q.Encode(), nil, &page); err != nil {
					return err
				}
				records = append(records, page.Records...)
				if !all || page.NextCursor == "" {
					break
				}
				q.Set("cursor", printable(page.NextCursor))
				page.NextCursor = ""
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"records": records, "nextCursor": page.NextCursor})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tAUDIT ID\tDECISION\tREF\tSUBJECT\tENVIRONMENT\tOUTCOME")
			for _, r := range records {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", printable(r.Time), printable(r.AuditID), printable(r.Decision),
					printable(r.Ref), printable(r.Subject.Ref), printable(r.Environment), printable(r.Outcome))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if page.NextCursor != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "more: --cursor %s (or --all)\n", page.NextCursor)
			}
			return nil
		},
	}
	api.add(search)
	fl := search.Flags()
	fl.StringVar(&format, "format", "text", "text or json")
	fl.StringVar(&f.ref, "ref", "", "only records of this capability ref")
	fl.StringVar(&f.subject, "subject", "", "only records of this subject (e.g. agent:support-bot)")
	fl.StringVar(&f.decision, "decision", "", "only this decision (allowed, denied, pending-approval, approved, rejected, ...)")
	fl.StringVar(&f.reason, "reason", "", "only records with this reason code (e.g. MISSING_GRANT)")
	fl.StringVar(&f.since, "since", "", "only records at or after this RFC 3339 time")
	fl.StringVar(&f.until, "until", "", "only records before this RFC 3339 time")
	fl.StringVar(&f.cursor, "cursor", "", "the cursor a previous page printed")
	fl.IntVar(&limit, "limit", 0, "records per page (1-100; default 50)")
	fl.BoolVar(&all, "all", false, "follow the cursors to the last page")
	auditCmd := &cobra.Command{Use: "audit", Short: "Work with the audit log"}
	auditCmd.AddCommand(search, newAuditVerifyCmd(), newAuditPruneCmd())
	return auditCmd
}
