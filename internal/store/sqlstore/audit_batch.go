package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"iter"
	"strings"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// auditColumns is one audit_log row, in the order auditArgs gives them.
const (
	auditColumns = `id, time, ref, subject_kind, subject_ref, environment, decision, reasons, suggestions,
		obligations, bundle_revision, input_hash, runner, outcome, latency_micros, parent_id, detail, org,
		policy_input, chain_id, chain_seq, chain_hash`
	auditColumnCount = 22
	// auditRowsPerInsert bounds one INSERT statement, a power of two (see pow2Chunks):
	// 22 × 64 placeholders stay far below SQLite's 32,766 and PostgreSQL's 65,535, and
	// one statement text per size is cached.
	auditRowsPerInsert = 64
)

// CheckBatch validates an audit batch of at least one record and the counters saved with it,
// before any engine writes them; op names the batch in errors.
func CheckBatch(rs []store.AuditRecord, usage []store.UsageCount) (op string, err error) {
	op = fmt.Sprintf("append %d audit records (first %q)", len(rs), rs[0].ID)
	for i, r := range rs {
		if err := r.Validate(); err != nil {
			return op, fmt.Errorf("%s: record %d: %w", op, i, err)
		}
	}
	return op, validateCounts(op, usage)
}

// AppendAudits implements store.Store: every record, or none, in one transaction, so one
// commit (one fsync) serves the whole batch.
func (s *Store) AppendAudits(ctx context.Context, rs []store.AuditRecord) error {
	return s.AppendAuditsWithUsage(ctx, rs, nil)
}

// AppendAuditsWithUsage implements store.Store: the records and the counters in one
// transaction.
func (s *Store) AppendAuditsWithUsage(ctx context.Context, rs []store.AuditRecord, usage []store.UsageCount) error {
	if len(rs) == 0 {
		return s.SaveUsage(ctx, usage)
	}
	op, err := CheckBatch(rs, usage)
	if err != nil {
		return err
	}
	steps := s.usageSteps(nil, usage)
	for chunk := range pow2Chunks(rs, auditRowsPerInsert) {
		args := make([]any, 0, len(chunk)*auditColumnCount)
		for _, r := range chunk {
			args = s.auditArgs(args, r)
		}
		steps = append(steps, step{s.auditInsert(len(chunk)), args})
	}
	return s.runSteps(ctx, op, append(steps, s.chainSteps(rs)...))
}

// pow2Chunks cuts s into chunks of at most limit elements (a power of two), each a power
// of two long (7 with limit 64: 4, 2, 1), so a batch's statements are of a few lengths only and the
// prepared ones stay few (SQLite keeps each statement's program in memory).
func pow2Chunks[T any](s []T, limit int) iter.Seq[[]T] {
	return func(yield func([]T) bool) {
		for len(s) > 0 {
			n := limit
			for n > len(s) {
				n /= 2
			}
			if !yield(s[:n:n]) {
				return
			}
			s = s[n:]
		}
	}
}

// step is one statement of a batch's transaction.
type step struct {
	q    string // bound
	args []any
}

// runSteps runs steps in one transaction; with Dialect.PrepareBatches each through its
// prepared statement, prepared before the transaction begins (see prepared).
func (s *Store) runSteps(ctx context.Context, op string, steps []step) error {
	var stmts []*sql.Stmt
	if s.d.PrepareBatches {
		stmts = make([]*sql.Stmt, len(steps))
		for i, st := range steps {
			var err error
			if stmts[i], err = s.prepared(ctx, st.q); err != nil {
				return s.fail(op, err)
			}
		}
	}
	return s.inTx(ctx, op, func(tx *sql.Tx) error {
		for i, st := range steps {
			var err error
			if stmts != nil {
				_, err = tx.StmtContext(ctx, stmts[i]).ExecContext(ctx, st.args...)
			} else {
				_, err = tx.ExecContext(ctx, st.q, st.args...)
			}
			if err != nil {
				return s.fail(op, err)
			}
		}
		return nil
	})
}

// chainHeadUpsert checkpoints one chain's head, never moving it back.
const chainHeadUpsert = `INSERT INTO audit_chain_heads (chain_id, seq, hash, updated_at, mac) VALUES (?, ?, ?, ?, ?)
	ON CONFLICT (chain_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, updated_at = excluded.updated_at, mac = excluded.mac
	WHERE excluded.seq > audit_chain_heads.seq`

// chainSteps record the last link of each chain in rs as its head.
func (s *Store) chainSteps(rs []store.AuditRecord) []step {
	last := LastLinks(rs)
	steps := make([]step, 0, len(last))
	for _, l := range last {
		steps = append(steps, step{s.d.bind(chainHeadUpsert), []any{l.ChainID, l.Seq, l.Hash, s.d.TimeArg(store.Stamp(time.Time{})), l.HeadMAC}})
	}
	return steps
}

// LastLinks is the last link (highest seq) of each chain the batch rs extends: the chains'
// new heads.
func LastLinks(rs []store.AuditRecord) map[string]store.ChainLink {
	last := map[string]store.ChainLink{}
	for _, r := range rs {
		if r.Chain.ChainID != "" && r.Chain.Seq > last[r.Chain.ChainID].Seq {
			last[r.Chain.ChainID] = r.Chain
		}
	}
	return last
}

// auditArgs appends the column values of r to args.
func (s *Store) auditArgs(args []any, r store.AuditRecord) []any {
	return append(args, r.ID, s.d.TimeArg(store.Stamp(r.Time)), r.Ref, r.SubjectKind, r.SubjectRef,
		r.Environment, r.Decision, jsonArg(r.Reasons), jsonArg(r.Suggestions), jsonArg(r.Obligations),
		r.BundleRevision, r.InputHash, r.Runner, r.Outcome, r.LatencyMicros, r.ParentID, jsonArg(r.Detail), r.Org,
		jsonArg(r.PolicyInput), r.Chain.ChainID, r.Chain.Seq, r.Chain.Hash)
}

// writeRows writes n copies of a VALUES row, comma-separated.
func writeRows(b *strings.Builder, n int, row string) {
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
}

// statements caches the bound text of the statements made per number of rows (the batches'
// INSERT and UPSERT, the counters' adds), per placeholder style: each is built on first use,
// not on every call.
var statements sync.Map // statementKey → string

type statementKey struct {
	kind     string
	numbered bool
	rows     int
}

// statement is build(rows) bound to the dialect's placeholders, made once per kind and rows.
func (s *Store) statement(kind string, rows int, build func(rows int) string) string {
	key := statementKey{kind, s.d.NumberedParams, rows}
	if q, ok := statements.Load(key); ok {
		return q.(string)
	}
	q, _ := statements.LoadOrStore(key, s.d.bind(build(rows)))
	return q.(string)
}

// auditInsert is the dialect's INSERT of rows audit records.
func (s *Store) auditInsert(rows int) string {
	if s.d.InsertOrFail {
		return s.statement("audit insert or fail", rows, func(rows int) string { return auditInsertText("INSERT OR FAIL", rows) })
	}
	return s.statement("audit insert", rows, func(rows int) string { return auditInsertText("INSERT", rows) })
}

func auditInsertText(verb string, rows int) string {
	var b strings.Builder
	b.WriteString(verb + " INTO audit_log (" + auditColumns + ") VALUES ")
	writeRows(&b, rows, "("+strings.Repeat("?, ", auditColumnCount-1)+"?)")
	return b.String()
}
