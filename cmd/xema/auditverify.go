package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/deploykeys"
	"github.com/xemahq/xema/internal/masterkey"
	"github.com/xemahq/xema/internal/timearg"
)

// newAuditVerifyCmd is `xema audit verify`.
func newAuditVerifyCmd() *cobra.Command {
	var sf storeFlags
	var mf masterFlags
	var sinceAt, archive string
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check the audit log's hash chains (or an archive's): exit 0 when intact, 1 naming the first record altered, deleted or inserted",
		Long: `verify re-derives every hash chain of the audit log from its records and compares it with the
checkpointed chain heads. It detects a record altered, deleted (a gap, or a shortened tail) or
inserted behind the gateway's back, even with the append-only triggers dropped. Records older
than every chain (written before chaining existed) are counted, not judged. A pruned log is
verified from each chain's prune checkpoint on (the checkpoint itself is authenticated). Each
chain's head and its registration are authenticated too, so a tail cut with the head set back, or
a chain deleted whole, is a break; every stored key the master key does not vouch for is one as
well. It names the newest record it vouches for.

With --archive FILE it verifies an archive written by xema audit prune by itself: every record's
link, each segment complete, its manifest and end authenticated. Both need the deployment's
chain keys: the store and the master key.`,
		Example: `  xema audit verify --data-dir .xema
  xema audit verify --store postgres://... --since 2026-12-01T00:00:00Z
  xema audit verify --data-dir .xema --archive audit-2026-09.jsonl.gz`,
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
			// Only read: a store no gateway ever chained has no heads and needs no master key.
			var keys [][]byte
			var breaks []audit.Break
			if heads, err := st.ChainHeads(ctx); err != nil {
				return err
			} else if len(heads) > 0 || archive != "" {
				w, err := mf.open(sf.dataDir)
				if err != nil {
					return err
				}
				if keys, err = deploykeys.ChainKeys(ctx, st, w); err != nil {
					return err
				}
				if breaks, err = keyBreaks(ctx, st, w); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			if archive != "" {
				f, err := os.Open(archive)
				if err != nil {
					return &exitError{code: 2, err: fmt.Errorf("--archive: %w", err)}
				}
				defer f.Close()
				res, err := audit.VerifyArchive(f, keys)
				if err != nil {
					return &exitError{code: 2, err: fmt.Errorf("--archive %s: %w", archive, err)}
				}
				if res.Verified && len(breaks) == 0 {
					if res.UnchainedCounted {
						fmt.Fprintln(out, "note: a format 1 archive: its unchained lines are covered by their count only")
					}
					fmt.Fprintf(out, "intact archive: %d segment(s), %d record(s) (%d unchained), before %s\n", len(res.Manifest.Chains),
						res.Records, res.Unchained, res.Manifest.Before.Format(time.RFC3339))
					return nil
				}
				breaks = append(breaks, res.Breaks...)
			} else {
				res, err := audit.Verify(ctx, st, keys, since)
				if err != nil {
					return err
				}
				if res.Verified && len(breaks) == 0 {
					printIntact(out, res)
					return nil
				}
				breaks = append(breaks, res.Breaks...)
			}
			return reportBreaks(out, breaks)
		},
	}
	sf.add(cmd)
	mf.add(cmd)
	cmd.Flags().StringVar(&sinceAt, "since", "", "only report breaks at records from this time on: RFC 3339, or a duration ago such as 24h")
	cmd.Flags().StringVar(&archive, "archive", "", "verify this archive (written by xema audit prune --archive) instead of the live log")
	return cmd
}

// keyBreaks are the stored keys the master key does not vouch for, as breaks: only keys it
// vouches for verify anything, and any other key row is itself evidence (or a raw key still
// to adopt), so it fails the check.
func keyBreaks(ctx context.Context, st deploykeys.Store, w masterkey.Wrapper) ([]audit.Break, error) {
	problems, err := deploykeys.Unauthenticated(ctx, st, w)
	if err != nil {
		return nil, err
	}
	var breaks []audit.Break
	for _, p := range problems {
		breaks = append(breaks, audit.Break{Problem: p.Why})
	}
	return breaks, nil
}

// printIntact prints the summary of an intact audit log.
func printIntact(out io.Writer, res audit.VerifyResult) {
	fmt.Fprintf(out, "intact: %d chain(s), %d chained record(s), %d older unchained record(s)", res.Chains, res.Records, res.Legacy)
	if !res.Pruned.Before.IsZero() {
		fmt.Fprintf(out, "; pruned before %s (verified from each chain's checkpoint; %d pruned record(s) awaiting deletion)",
			res.Pruned.Before.UTC().Format(time.RFC3339), res.Pending)
	}
	fmt.Fprintln(out)
	if res.Newest.ID != "" {
		fmt.Fprintf(out, "newest record vouched for: %s at %s (whoever can write the database can still set the whole log back to an earlier state of itself: compare with your decision log export)\n",
			res.Newest.ID, res.Newest.Time.UTC().Format(time.RFC3339Nano))
	}
	if res.PreRegistry > 0 {
		fmt.Fprintf(out, "%d chain(s) written before the chain registry: their ends are not authenticated\n", res.PreRegistry)
	}
}

// reportBreaks prints every break (at least one) and returns exit 1 naming the first.
func reportBreaks(out io.Writer, breaks []audit.Break) error {
	for _, b := range breaks {
		fmt.Fprintln(out, "BROKEN:", b.Error())
	}
	return &exitError{code: 1, err: fmt.Errorf("audit log not intact: first break at %s", breaks[0].Error())}
}
