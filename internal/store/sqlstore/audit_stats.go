package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// AuditStats implements store.Store: five grouped reads of the range's rows, each through
// audit_log_org_time (org, time), so the cost is the range's records, not the log's.
func (s *Store) AuditStats(ctx context.Context, q store.AuditStatsQuery) (store.AuditStats, error) {
	if q.Bucket <= 0 || q.Top <= 0 || len(q.Calls) == 0 || !q.Since.Before(q.Until) {
		return store.AuditStats{}, fmt.Errorf("audit stats: %w: a bucket, a top, call decisions and since before until are required", store.ErrInvalid)
	}
	var out store.AuditStats
	conds, rangeArgs := omit([]string{"a.org = ? AND a.time >= ? AND a.time < ?"},
		[]any{q.Org, s.d.TimeArg(store.Stamp(q.Since)), s.d.TimeArg(store.Stamp(q.Until))}, "a.", q.Omit)
	rangeWhere := strings.Join(conds, " AND ")
	calls := "a.runner = '' AND a.decision IN (?" + strings.Repeat(", ?", len(q.Calls)-1) + ")"
	callArgs := append([]any{}, rangeArgs...)
	for _, d := range q.Calls {
		callArgs = append(callArgs, d)
	}
	since, bucket := store.Stamp(q.Since).UnixMicro(), q.Bucket.Microseconds()

	var err error
	out.Series, err = list(ctx, s, "audit stats: series", func(r scanner) (store.BucketCount, error) {
		var b store.BucketCount
		return b, r.Scan(&b.Bucket, &b.Decision, &b.Count)
	}, fmt.Sprintf(`SELECT (%s - %d) / %d, a.decision, COUNT(*) FROM audit_log a WHERE %s AND %s GROUP BY 1, 2 ORDER BY 1, 2`,
		s.d.MicrosOf("a.time"), since, bucket, rangeWhere, calls), callArgs...)
	if err != nil {
		return out, err
	}
	keyCount := func(r scanner) (store.KeyCount, error) {
		var k store.KeyCount
		return k, r.Scan(&k.Key, &k.Count)
	}
	out.Refs, err = list(ctx, s, "audit stats: refs", keyCount, fmt.Sprintf(
		`SELECT a.ref, COUNT(*) FROM audit_log a WHERE %s AND %s GROUP BY a.ref ORDER BY 2 DESC, 1 LIMIT %d`,
		rangeWhere, calls, q.Top), callArgs...)
	if err != nil {
		return out, err
	}
	// A record names a code once however often its reasons repeat it, as the search by
	// reason (ReasonCodeMatch) finds it once.
	out.Reasons, err = list(ctx, s, "audit stats: reasons", keyCount, fmt.Sprintf(
		`SELECT code, COUNT(*) FROM (SELECT DISTINCT a.id, %s AS code FROM audit_log a, %s WHERE %s AND a.decision = 'denied') r
		WHERE code IS NOT NULL GROUP BY code ORDER BY 2 DESC, 1 LIMIT %d`,
		s.d.ReasonElementCode, s.d.ReasonElements, rangeWhere, q.Top), rangeArgs...)
	if err != nil {
		return out, err
	}
	out.Runners, err = list(ctx, s, "audit stats: runners", func(r scanner) (store.RunnerCount, error) {
		var c store.RunnerCount
		return c, r.Scan(&c.Runner, &c.Runs, &c.Errors, &c.LatencySumMicros, &c.LatencyMaxMicros)
	}, `SELECT a.runner, COUNT(*), SUM(CASE WHEN a.outcome <> 'ok' THEN 1 ELSE 0 END),
		CAST(SUM(a.latency_micros) AS BIGINT), MAX(a.latency_micros)
		FROM audit_log a WHERE `+rangeWhere+` AND a.decision = 'allowed' AND a.runner NOT IN ('', 'approval')
		GROUP BY a.runner ORDER BY a.runner`, rangeArgs...)
	if err != nil {
		return out, err
	}
	out.Revisions, err = list(ctx, s, "audit stats: revisions", func(r scanner) (store.RevisionSpan, error) {
		var v store.RevisionSpan
		return v, r.Scan(&v.Revision, timeCol{&v.First}, timeCol{&v.Last})
	}, `SELECT a.bundle_revision, MIN(a.time), MAX(a.time) FROM audit_log a WHERE `+rangeWhere+`
		GROUP BY a.bundle_revision ORDER BY 2, 1`, rangeArgs...)
	return out, err
}

// ApprovalsWaiting implements store.Store.
func (s *Store) ApprovalsWaiting(ctx context.Context, org string, now time.Time) (int64, time.Time, error) {
	var n int64
	var oldest time.Time
	row := s.db.QueryRowContext(ctx, s.d.bind(`SELECT COUNT(*) FROM approvals WHERE org = ? AND status = ? AND expires_at > ?`),
		org, store.ApprovalPending, s.d.TimeArg(store.Stamp(now)))
	if err := row.Scan(&n); err != nil {
		return 0, oldest, s.fail("count waiting approvals", err)
	}
	if n == 0 {
		return 0, oldest, nil
	}
	row = s.db.QueryRowContext(ctx, s.d.bind(`SELECT created_at FROM approvals WHERE org = ? AND status = ? AND expires_at > ?
		ORDER BY created_at LIMIT 1`), org, store.ApprovalPending, s.d.TimeArg(store.Stamp(now)))
	if err := row.Scan(timeCol{&oldest}); err != nil {
		return 0, oldest, s.fail("read the oldest waiting approval", err)
	}
	return n, oldest, nil
}
