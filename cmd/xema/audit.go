package main

import (
	"fmt"
	"net/http"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/timearg"
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
			// A duration is resolved once here, so every page of --all reads the same window.
			bounds := map[string]string{"since": f.since, "until": f.until}
			now := time.Now()
			for name, v := range bounds {
				if v == "" {
					continue
				}
				t, err := timearg.Parse(v, now)
				if err != nil {
					return &exitError{code: 2, err: fmt.Errorf("--%s %w", name, err)}
				}
				bounds[name] = t.Format(time.RFC3339Nano)
			}
			q := queryOf(map[string]string{"ref": f.ref, "subject": f.subject, "decision": f.decision,
				"reason": f.reason, "since": bounds["since"], "until": bounds["until"], "cursor": f.cursor})
			if limit != 0 {
				q.Set("limit", strconv.Itoa(limit))
			}
			type auditPage struct {
				Records    []audit.Record `json:"records"`
				NextCursor string         `json:"nextCursor"`
			}
			var page auditPage
			var records []audit.Record
			for {
				// A fresh page each time: decoding into the previous one would reuse the
				// buffers of its records' raw JSON fields, which records already holds.
				page = auditPage{}
				if err := c.Do(cmd.Context(), http.MethodGet, "/v1/audit?"+q.Encode(), nil, &page); err != nil {
					return err
				}
				records = append(records, page.Records...)
				if !all || page.NextCursor == "" {
					break
				}
				q.Set("cursor", printable(page.NextCursor))
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
	fl.StringVar(&f.ref, "ref", "", "only records of this capability ref (exact: globs such as 'ticket:*' are refused)")
	fl.StringVar(&f.subject, "subject", "", "only records of this subject (e.g. agent:support-bot)")
	fl.StringVar(&f.decision, "decision", "", "only this decision (allowed, denied, pending-approval, approved, rejected, ...)")
	fl.StringVar(&f.reason, "reason", "", "only records with this reason code (e.g. MISSING_GRANT)")
	fl.StringVar(&f.since, "since", "", "only records at or after this time: RFC 3339, or a duration ago such as 24h")
	fl.StringVar(&f.until, "until", "", "only records before this time: RFC 3339, or a duration ago such as 1h")
	fl.StringVar(&f.cursor, "cursor", "", "the cursor a previous page printed")
	fl.IntVar(&limit, "limit", 0, "records per page (1-100; default 50)")
	fl.BoolVar(&all, "all", false, "follow the cursors to the last page")
	auditCmd := &cobra.Command{Use: "audit", Short: "Work with the audit log"}
	auditCmd.AddCommand(search, newAuditVerifyCmd(), newAuditPruneCmd())
	return auditCmd
}
