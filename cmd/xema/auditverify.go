package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/app"
	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/timearg"
)

// newAuditVerifyCmd is `xema audit verify`.
func newAuditVerifyCmd() *cobra.Command {
	var sf storeFlags
	var sinceAt string
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check the audit log's hash chains: exit 0 when intact, 1 naming the first record altered, deleted or inserted",
		Long: `verify re-derives every hash chain of the audit log from its records and compares it with the
checkpointed chain heads. It detects a record altered, deleted (a gap, or a shortened tail) or
inserted behind the gateway's back, even with the append-only triggers dropped. Records older
than every chain (written before chaining existed) are counted, not judged.`,
		Example: `  xema audit verify --data-dir .xema
  xema audit verify --store postgres://... --since 2026-12-01T00:00:00Z`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var since time.Time
			if sinceAt != "" {
				t, err := timearg.Parse(sinceAt, time.Now())
				if err != nil {
					return &exitError{code: 2, err: fmt.Errorf("--since %w", err)}
				}
				since = t
			}
			ctx := cmd.Context()
			st, err := sf.open(ctx)
			if err != nil {
				return err
			}
			defer st.Close()
			// Only read: a store no gateway ever chained has no heads, and needs no key (asking
			// for it would store one).
			var key []byte
			if heads, err := st.ChainHeads(ctx); err != nil {
				return err
			} else if len(heads) > 0 {
				if key, err = app.DeploymentKey(ctx, st, audit.KeyChain); err != nil {
					return err
				}
			}
			res, err := audit.Verify(ctx, st, key, since)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if res.Verified {
				fmt.Fprintf(out, "intact: %d chain(s), %d chained record(s), %d older unchained record(s)\n", res.Chains, res.Records, res.Legacy)
				return nil
			}
			for _, b := range res.Breaks {
				fmt.Fprintln(out, "BROKEN:", b.Error())
			}
			return &exitError{code: 1, err: fmt.Errorf("audit log not intact: first break at %s", res.Breaks[0].Error())}
		},
	}
	sf.add(cmd)
	cmd.Flags().StringVar(&sinceAt, "since", "", "only report breaks at records from this time on: RFC 3339, or a duration ago such as 24h")
	return cmd
}
