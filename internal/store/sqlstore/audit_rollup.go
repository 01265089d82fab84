package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// The rollups (migration 0019) count the audit log by org, bucket and the dimensions the
// overview reads: decision, ref, subject kind (what AuditOmit tests), runner and policy
// revision, with the sums and extremes of each cell, and denied records by reason code.
// A chain's records commit in seq order (one writer per chain, audit.Log), so a watermark
// per chain says exactly which records are folded; unchained records are never folded (the
// overview reads them through audit_log_unchained).

// rolledColumns are the audit_log columns (table aliased a) a fold reads.
const rolledColumns = `a.org, a.time, a.decision, a.ref, a.subject_kind, a.runner, a.outcome, a.latency_micros, a.bundle_revision, a.reasons`

// rolled is one record as a fold reads it.
type rolled struct {
	org                                                   string
	at                                                    time.Time
	decision, ref, subjectKind, runner, outcome, revision string
	latency                                               int64
	reasons                                               []byte
}

func scanRolled(sc scanner) (rolled, error) {
	var r rolled
	var reasons []byte
	err := sc.Scan(&r.org, timeCol{&r.at}, &r.decision, &r.ref, &r.subjectKind, &r.runner, &r.outcome, &r.latency, &r.revision, &reasons)
	r.reasons = jsonCol(reasons)
	return r, err
}

// cellKey is one rollup row's key; grain in seconds, bucket its start in Unix microseconds.
type cellKey struct {
	org                                          string
	grain, bucket                                int64
	decision, ref, subjectKind, runner, revision string
}

// cell sums one key's records; first and last are Unix microseconds.
type cell struct{ records, errors, latencySum, latencyMax, first, last int64 }

func (c *cell) merge(o cell) {
	if c.records == 0 {
		*c = o
		return
	}
	c.records += o.records
	c.errors += o.errors
	c.latencySum += o.latencySum
	c.latencyMax = max(c.latencyMax, o.latencyMax)
	c.first = min(c.first, o.first)
	c.last = max(c.last, o.last)
}

type reasonKey struct {
	org           string
	grain, bucket int64
	code          string
}

// fold is a set of cells being summed.
type fold struct {
	cells   map[cellKey]*cell
	reasons map[reasonKey]int64
}

func newFold() *fold { return &fold{cells: map[cellKey]*cell{}, reasons: map[reasonKey]int64{}} }

// grainFrom is one grain a fold counts into (seconds), and the oldest bucket start it keeps
// (Unix microseconds; older records are not counted at that grain).
type grainFrom struct{ grain, from int64 }

// add counts r into its bucket of each grain.
func (f *fold) add(r rolled, grains []grainFrom) {
	at := r.at.UnixMicro()
	c := cell{records: 1, latencySum: r.latency, latencyMax: r.latency, first: at, last: at}
	if r.outcome != "ok" {
		c.errors = 1
	}
	var codes []string
	if r.decision == "denied" {
		codes = reasonCodes(r.reasons)
	}
	for _, g := range grains {
		b := bucketOf(at, g.grain)
		if b < g.from {
			continue
		}
		k := cellKey{org: r.org, grain: g.grain, bucket: b, decision: r.decision, ref: r.ref, subjectKind: r.subjectKind, runner: r.runner, revision: r.revision}
		f.cell(k).merge(c)
		for _, code := range codes {
			f.reasons[reasonKey{r.org, g.grain, b, code}]++
		}
	}
}

func (f *fold) cell(k cellKey) *cell {
	c, ok := f.cells[k]
	if !ok {
		c = &cell{}
		f.cells[k] = c
	}
	return c
}

// bucketOf is the start of the grain-second bucket holding the Unix microsecond at.
func bucketOf(at, grain int64) int64 {
	w := grain * 1e6
	b := at - at%w
	if at < 0 && at%w != 0 {
		b -= w
	}
	return b
}

// reasonCodes are the distinct codes a reasons document names (none when it is not an array),
// as the audit search by reason code (Dialect.ReasonCodeMatch) matches them.
func reasonCodes(doc []byte) []string {
	var elems []json.RawMessage
	if json.Unmarshal(doc, &elems) != nil {
		return nil
	}
	var codes []string
	for _, e := range elems {
		var o map[string]json.RawMessage
		if json.Unmarshal(e, &o) != nil || o["code"] == nil || string(o["code"]) == "null" {
			continue
		}
		code := string(o["code"])
		var str string
		if json.Unmarshal(o["code"], &str) == nil {
			code = str
		}
		seen := false
		for _, c := range codes {
			seen = seen || c == code
		}
		if !seen {
			codes = append(codes, code)
		}
	}
	return codes
}

// readInto folds the rows q selects (of rolledColumns) at grains.
func (s *Store) readInto(ctx context.Context, c conn, f *fold, grains []grainFrom, op, q string, args ...any) (int64, error) {
	return s.readKept(ctx, c, f, grains, nil, op, q, args...)
}

// readKept is readInto of the rows keep keeps (all when nil).
func (s *Store) readKept(ctx context.Context, c conn, f *fold, grains []grainFrom, keep func(rolled) bool, op, q string, args ...any) (int64, error) {
	rows, err := c.QueryContext(ctx, s.d.bind(q), args...)
	if err != nil {
		return 0, s.fail(op, err)
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		r, err := scanRolled(rows)
		if err != nil {
			return n, s.fail(op, err)
		}
		if keep != nil && !keep(r) {
			continue
		}
		f.add(r, grains)
		n++
	}
	if err := rows.Err(); err != nil {
		return n, s.fail(op, err)
	}
	return n, nil
}

// pendingChain is a chain with records past its watermark: those after from, up to head.
type pendingChain struct {
	id         string
	from, head int64
}

// pendingChains are the chains whose head is past their watermark. Records at or below a
// prune base are being deleted and are not counted.
func (s *Store) pendingChains(ctx context.Context, c conn, op string) ([]pendingChain, error) {
	rows, err := c.QueryContext(ctx, `SELECT h.chain_id, h.seq, h.base_seq, COALESCE(w.seq, 0) FROM audit_chain_heads h
		LEFT JOIN audit_rollup_chains w ON w.chain_id = h.chain_id ORDER BY h.chain_id`)
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer rows.Close()
	var out []pendingChain
	for rows.Next() {
		var p pendingChain
		var base, mark int64
		if err := rows.Scan(&p.id, &p.head, &base, &mark); err != nil {
			return nil, s.fail(op, err)
		}
		if p.from = max(base, mark); p.head > p.from {
			out = append(out, p)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(op, err)
	}
	return out, nil
}

// chainTail selects a chain's records in (from, to] with rolledColumns, through audit_log_chain.
const chainTail = `SELECT ` + rolledColumns + ` FROM audit_log a WHERE a.chain_id = ? AND a.chain_id <> '' AND a.chain_seq > ? AND a.chain_seq <= ?`

// AdvanceAuditRollups implements store.Store, in one transaction.
func (s *Store) AdvanceAuditRollups(ctx context.Context, now time.Time, limit int) (store.RollupProgress, error) {
	const op = "advance audit rollups"
	var p store.RollupProgress
	if limit < 1 {
		return p, fmt.Errorf("%s: %w: limit %d", op, store.ErrInvalid, limit)
	}
	grains := keptGrains(now)
	err := s.inTx(ctx, op, func(tx *sql.Tx) error {
		p = store.RollupProgress{}
		if err := s.lockRollups(ctx, tx, op); err != nil {
			return err
		}
		chains, err := s.pendingChains(ctx, tx, op)
		if err != nil {
			return err
		}
		f := newFold()
		budget := int64(limit)
		for _, c := range chains {
			to := c.from // past the budget, nothing of this chain is folded
			if budget > 0 {
				to = min(c.head, c.from+budget)
				n, err := s.readInto(ctx, tx, f, grains, op, chainTail, c.id, c.from, to)
				if err != nil {
					return err
				}
				p.Folded += n
				budget -= to - c.from
				if _, err := s.exec(ctx, tx, `INSERT INTO audit_rollup_chains (chain_id, seq) VALUES (?, ?)
					ON CONFLICT (chain_id) DO UPDATE SET seq = excluded.seq`, c.id, to); err != nil {
					return s.fail(op, err)
				}
			}
			p.Left += c.head - to
		}
		if err := s.addFold(ctx, tx, op, f); err != nil {
			return err
		}
		if p.Recounted, err = s.recountStale(ctx, tx, op, grains); err != nil {
			return err
		}
		for _, g := range grains {
			for _, table := range []string{"audit_rollup", "audit_rollup_reasons"} {
				if _, err := s.exec(ctx, tx, `DELETE FROM `+table+` WHERE grain = ? AND bucket < ?`, g.grain, g.from); err != nil {
					return s.fail(op, err)
				}
			}
		}
		return nil
	})
	return p, err
}

// keptGrains are the rollup grains with the oldest bucket each keeps at now.
func keptGrains(now time.Time) []grainFrom {
	out := make([]grainFrom, 0, len(store.AuditStatsGrains))
	for w, keep := range store.AuditStatsGrains {
		g := int64(w / time.Second)
		out = append(out, grainFrom{g, bucketOf(now.Add(-keep).UnixMicro(), g)})
	}
	return out
}

// lockRollups makes the rollup pass and a prune's deletes take turns (Dialect.RollupLock).
func (s *Store) lockRollups(ctx context.Context, tx *sql.Tx, op string) error {
	if s.d.RollupLock == "" {
		return nil
	}
	if _, err := tx.ExecContext(ctx, s.d.RollupLock); err != nil {
		return s.fail(op+": lock the rollups", err)
	}
	return nil
}

// addFold adds f's cells to the rollups.
func (s *Store) addFold(ctx context.Context, tx *sql.Tx, op string, f *fold) error {
	upsert := `INSERT INTO audit_rollup (org, grain, bucket, decision, ref, subject_kind, runner, revision,
		records, errors, latency_sum, latency_max, first_at, last_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (org, grain, bucket, decision, ref, subject_kind, runner, revision) DO UPDATE SET
		records = audit_rollup.records + excluded.records, errors = audit_rollup.errors + excluded.errors,
		latency_sum = audit_rollup.latency_sum + excluded.latency_sum,
		latency_max = ` + s.d.Greatest + `(audit_rollup.latency_max, excluded.latency_max),
		first_at = ` + s.d.Least + `(audit_rollup.first_at, excluded.first_at),
		last_at = ` + s.d.Greatest + `(audit_rollup.last_at, excluded.last_at)`
	for k, c := range f.cells {
		if _, err := s.exec(ctx, tx, upsert, k.org, k.grain, k.bucket, k.decision, k.ref, k.subjectKind, k.runner, k.revision,
			c.records, c.errors, c.latencySum, c.latencyMax, c.first, c.last); err != nil {
			return s.fail(op, err)
		}
	}
	for k, n := range f.reasons {
		if _, err := s.exec(ctx, tx, `INSERT INTO audit_rollup_reasons (org, grain, bucket, code, records) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (org, grain, bucket, code) DO UPDATE SET records = audit_rollup_reasons.records + excluded.records`,
			k.org, k.grain, k.bucket, k.code, n); err != nil {
			return s.fail(op, err)
		}
	}
	return nil
}

// staleBatch bounds the buckets one pass counts again.
const staleBatch = 16

// recountStale counts again, from the records left, the buckets a prune deleted records of.
func (s *Store) recountStale(ctx context.Context, tx *sql.Tx, op string, grains []grainFrom) (int, error) {
	type stale struct {
		org           string
		grain, bucket int64
	}
	marks, err := listOn(ctx, s, tx, op, func(r scanner) (stale, error) {
		var m stale
		return m, r.Scan(&m.org, &m.grain, &m.bucket)
	}, fmt.Sprintf(`SELECT org, grain, bucket FROM audit_rollup_stale ORDER BY grain, bucket LIMIT %d`, staleBatch))
	if err != nil {
		return 0, err
	}
	for _, m := range marks {
		for _, table := range []string{"audit_rollup", "audit_rollup_reasons", "audit_rollup_stale"} {
			if _, err := s.exec(ctx, tx, `DELETE FROM `+table+` WHERE org = ? AND grain = ? AND bucket = ?`, m.org, m.grain, m.bucket); err != nil {
				return 0, s.fail(op, err)
			}
		}
		for _, g := range grains {
			if g.grain == m.grain && m.bucket >= g.from {
				f, err := s.recount(ctx, tx, op, m.org, m.grain, m.bucket)
				if err != nil {
					return 0, err
				}
				if err := s.addFold(ctx, tx, op, f); err != nil {
					return 0, err
				}
			}
		}
	}
	return len(marks), nil
}

// recount counts one bucket of org from its folded records (at or below their chain's
// watermark) still in the log.
func (s *Store) recount(ctx context.Context, c conn, op, org string, grain, bucket int64) (*fold, error) {
	f := newFold()
	since := time.UnixMicro(bucket)
	_, err := s.readInto(ctx, c, f, []grainFrom{{grain, bucket}}, op, `SELECT `+rolledColumns+` FROM audit_log a
		JOIN audit_rollup_chains w ON w.chain_id = a.chain_id
		WHERE a.org = ? AND a.time >= ? AND a.time < ? AND a.chain_id <> '' AND a.chain_seq <= w.seq`,
		org, s.d.TimeArg(since), s.d.TimeArg(since.Add(time.Duration(grain)*time.Second)))
	return f, err
}

// orgTime is a deleted record's org and time (Unix microseconds).
type orgTime struct {
	org string
	at  int64
}

// markStale marks, in a prune's delete transaction, the buckets of every grain holding the
// deleted records (org, Unix microseconds), so the next pass counts them again.
func (s *Store) markStale(ctx context.Context, tx *sql.Tx, op string, deleted map[orgTime]bool) error {
	marked := map[cellKey]bool{}
	for d := range deleted {
		for w := range store.AuditStatsGrains {
			g := int64(w / time.Second)
			k := cellKey{org: d.org, grain: g, bucket: bucketOf(d.at, g)}
			if marked[k] {
				continue
			}
			marked[k] = true
			if _, err := s.exec(ctx, tx, `INSERT INTO audit_rollup_stale (org, grain, bucket) VALUES (?, ?, ?)
				ON CONFLICT (org, grain, bucket) DO NOTHING`, k.org, k.grain, k.bucket); err != nil {
				return s.fail(op, err)
			}
		}
	}
	return nil
}
