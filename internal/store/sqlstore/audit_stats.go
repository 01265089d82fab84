package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// AuditStats implements store.Store, in one snapshot: the range's rollup cells of the
// org (its buckets times its distinct keys), its stale buckets counted again, the records
// past the watermarks (at most store.AuditStatsTail, through audit_log_chain), the
// range's unchained records (through audit_log_unchained, which holds none of the
// gateway's records) and, while the pass is behind past that tail, a count of the org's
// records of the range it left.
func (s *Store) AuditStats(ctx context.Context, q store.AuditStatsQuery) (store.AuditStats, error) {
	const op = "audit stats"
	_, grainKnown := store.AuditStatsGrains[q.Bucket]
	if !grainKnown || q.Top <= 0 || len(q.Calls) == 0 || !q.Since.Before(q.Until) ||
		q.Since.UnixMicro()%q.Bucket.Microseconds() != 0 || q.Until.UnixMicro()%q.Bucket.Microseconds() != 0 {
		return store.AuditStats{}, fmt.Errorf("%s: %w: a bucket of the grains, a top, call decisions and since before until, both whole buckets, are required", op, store.ErrInvalid)
	}
	grain, since, until := int64(q.Bucket/time.Second), q.Since.UnixMicro(), q.Until.UnixMicro()
	grains := []grainFrom{{grain, since}}
	f := newFold()
	var uncounted int64
	tx, err := s.db.BeginTx(ctx, s.d.SnapshotTx)
	if err != nil {
		return store.AuditStats{}, s.fail(op, err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to keep or lose
	err = s.readRollups(ctx, tx, f, q.Org, grain, since, until)
	if err == nil {
		err = s.recountStaleIn(ctx, tx, f, q.Org, grain, since, until)
	}
	var chains []pendingChain
	if err == nil {
		chains, err = s.pendingChains(ctx, tx, op)
	}
	budget := int64(store.AuditStatsTail)
	var read int64 // the org's records of the range read past the watermarks
	behind := false
	for _, c := range chains {
		if err != nil {
			break
		}
		to := min(c.head, c.from+max(budget, 0))
		if to > c.from {
			// The org and range are kept here, not in SQL: a planner given them may read the
			// window's records through audit_log_org_time instead of the tail's seqs.
			var n int64
			n, err = s.readKept(ctx, tx, f, grains, func(r rolled) bool {
				return r.org == q.Org && !r.at.Before(q.Since) && r.at.Before(q.Until)
			}, op, chainTail, c.id, c.from, to)
			read += n
			budget -= to - c.from
		}
		behind = behind || c.head > to
	}
	if behind && err == nil {
		// Uncounted is the org's records of the range left past the tail, never the log's
		// backlog as a whole, which would tell the org how much every other org called. Counted
		// through the org's range (as the log was read before the rollups), only while the pass
		// is behind by more than the tail: never a scan of other orgs' backlog.
		var past int64
		err = tx.QueryRowContext(ctx, s.d.bind(`SELECT COUNT(*) FROM audit_log a
			JOIN audit_chain_heads h ON h.chain_id = a.chain_id LEFT JOIN audit_rollup_chains w ON w.chain_id = a.chain_id
			WHERE a.org = ? AND a.time >= ? AND a.time < ? AND a.chain_id <> ''
			AND a.chain_seq > `+s.d.Greatest+`(h.base_seq, COALESCE(w.seq, 0))`),
			q.Org, s.d.TimeArg(q.Since), s.d.TimeArg(q.Until)).Scan(&past)
		if err != nil {
			err = s.fail(op, err)
		}
		uncounted = past - read
	}
	if err == nil {
		_, err = s.readInto(ctx, tx, f, grains, op, `SELECT `+rolledColumns+` FROM audit_log a
			WHERE a.org = ? AND a.chain_id = '' AND a.time >= ? AND a.time < ?`, q.Org, s.d.TimeArg(q.Since), s.d.TimeArg(q.Until))
	}
	if err != nil {
		return store.AuditStats{}, err
	}
	out := summarize(q, f)
	out.Uncounted = uncounted
	return out, nil
}

// readRollups adds the rollup cells of org's buckets of grain in [since, until) to f.
func (s *Store) readRollups(ctx context.Context, c conn, f *fold, org string, grain, since, until int64) error {
	const op = "audit stats: rollups"
	rows, err := c.QueryContext(ctx, s.d.bind(`SELECT bucket, decision, ref, subject_kind, runner, revision,
		records, errors, latency_sum, latency_max, first_at, last_at FROM audit_rollup
		WHERE org = ? AND grain = ? AND bucket >= ? AND bucket < ?`), org, grain, since, until)
	if err != nil {
		return s.fail(op, err)
	}
	for rows.Next() {
		k := cellKey{org: org, grain: grain}
		var v cell
		if err := rows.Scan(&k.bucket, &k.decision, &k.ref, &k.subjectKind, &k.runner, &k.revision,
			&v.records, &v.errors, &v.latencySum, &v.latencyMax, &v.first, &v.last); err != nil {
			rows.Close()
			return s.fail(op, err)
		}
		f.cell(k).merge(v)
	}
	if err := closeRows(rows); err != nil {
		return s.fail(op, err)
	}
	rows, err = c.QueryContext(ctx, s.d.bind(`SELECT bucket, code, records FROM audit_rollup_reasons
		WHERE org = ? AND grain = ? AND bucket >= ? AND bucket < ?`), org, grain, since, until)
	if err != nil {
		return s.fail(op, err)
	}
	for rows.Next() {
		k := reasonKey{org: org, grain: grain}
		var n int64
		if err := rows.Scan(&k.bucket, &k.code, &n); err != nil {
			rows.Close()
			return s.fail(op, err)
		}
		f.reasons[k] += n
	}
	if err := closeRows(rows); err != nil {
		return s.fail(op, err)
	}
	return nil
}

// recountStaleIn replaces in f the stale buckets of org in range (a prune deleted records of
// them that the next pass has not counted again) with their count from the records left.
func (s *Store) recountStaleIn(ctx context.Context, c conn, f *fold, org string, grain, since, until int64) error {
	const op = "audit stats: stale buckets"
	buckets, err := listOn(ctx, s, c, op, func(r scanner) (int64, error) {
		var b int64
		return b, r.Scan(&b)
	}, `SELECT bucket FROM audit_rollup_stale WHERE org = ? AND grain = ? AND bucket >= ? AND bucket < ?`, org, grain, since, until)
	if err != nil {
		return err
	}
	for _, b := range buckets {
		for k := range f.cells {
			if k.bucket == b {
				delete(f.cells, k)
			}
		}
		for k := range f.reasons {
			if k.bucket == b {
				delete(f.reasons, k)
			}
		}
		again, err := s.recount(ctx, c, op, org, grain, b)
		if err != nil {
			return err
		}
		for k, v := range again.cells {
			f.cell(k).merge(*v)
		}
		for k, n := range again.reasons {
			f.reasons[k] += n
		}
	}
	return nil
}

func closeRows(rows *sql.Rows) error {
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	return rows.Close()
}

// summarize answers q from the cells of its org, grain and range.
func summarize(q store.AuditStatsQuery, f *fold) store.AuditStats {
	var out store.AuditStats
	since, width := q.Since.UnixMicro(), q.Bucket.Microseconds()
	calls := map[string]bool{}
	for _, d := range q.Calls {
		calls[d] = true
	}
	omitted := map[string]bool{}
	if q.Omit != nil {
		for _, r := range q.Omit.Refs {
			omitted[r] = true
		}
	}
	series := map[store.BucketCount]int64{} // Count zero: the key
	refs := map[string]int64{}
	runners := map[string]*store.RunnerCount{}
	revisions := map[string]*store.RevisionSpan{}
	for k, c := range f.cells {
		if k.decision == "allowed" && q.Omit != nil && k.subjectKind == q.Omit.SubjectKind && omitted[k.ref] {
			continue
		}
		if k.runner == "" && calls[k.decision] {
			series[store.BucketCount{Bucket: (k.bucket - since) / width, Decision: k.decision}] += c.records
			refs[k.ref] += c.records
		}
		if k.decision == "allowed" && k.runner != "" && k.runner != "approval" {
			r := runners[k.runner]
			if r == nil {
				r = &store.RunnerCount{Runner: k.runner}
				runners[k.runner] = r
			}
			r.Runs += c.records
			r.Errors += c.errors
			r.LatencySumMicros += c.latencySum
			r.LatencyMaxMicros = max(r.LatencyMaxMicros, c.latencyMax)
		}
		first, last := time.UnixMicro(c.first).UTC(), time.UnixMicro(c.last).UTC()
		if v := revisions[k.revision]; v == nil {
			revisions[k.revision] = &store.RevisionSpan{Revision: k.revision, First: first, Last: last}
		} else {
			v.First, v.Last = minTime(v.First, first), maxTime(v.Last, last)
		}
	}
	for b, n := range series {
		b.Count = n
		out.Series = append(out.Series, b)
	}
	slices.SortFunc(out.Series, func(a, b store.BucketCount) int {
		return cmp.Or(cmp.Compare(a.Bucket, b.Bucket), cmp.Compare(a.Decision, b.Decision))
	})
	out.Refs = top(refs, q.Top)
	reasons := map[string]int64{}
	for k, n := range f.reasons {
		reasons[k.code] += n
	}
	out.Reasons = top(reasons, q.Top)
	for _, r := range runners {
		out.Runners = append(out.Runners, *r)
	}
	slices.SortFunc(out.Runners, func(a, b store.RunnerCount) int { return cmp.Compare(a.Runner, b.Runner) })
	for _, v := range revisions {
		out.Revisions = append(out.Revisions, *v)
	}
	slices.SortFunc(out.Revisions, func(a, b store.RevisionSpan) int {
		return cmp.Or(a.First.Compare(b.First), cmp.Compare(a.Revision, b.Revision))
	})
	return out
}

// top is the n largest counts of m, ties in key order.
func top(m map[string]int64, n int) []store.KeyCount {
	var out []store.KeyCount
	for k, c := range m {
		if c > 0 {
			out = append(out, store.KeyCount{Key: k, Count: c})
		}
	}
	slices.SortFunc(out, func(a, b store.KeyCount) int { return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Key, b.Key)) })
	return out[:min(n, len(out))]
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
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
