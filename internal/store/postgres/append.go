package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/sqlstore"
)

// appendBatch writes a group-committed batch in one statement, so in one round trip and
// one implicit transaction (one commit, one WAL flush): the records, each chain's new head
// and the saved counters, each column passed as one array. Its text is the same whatever
// the batch's size, so the server parses and plans it once per connection. Every part or
// none: a stored id (23505), a JSON document that does not parse (22P02), a NULL or empty
// required column (23502, 23514) fails the whole statement.
const appendBatch = `WITH records AS (
	INSERT INTO audit_log (id, time, ref, subject_kind, subject_ref, environment, decision, reasons, suggestions,
		obligations, bundle_revision, input_hash, runner, outcome, latency_micros, parent_id, detail, org,
		policy_input, chain_id, chain_seq, chain_hash)
	SELECT id, time, ref, subject_kind, subject_ref, environment, decision, reasons::json, suggestions::json,
		obligations::json, bundle_revision, input_hash, runner, outcome, latency_micros, parent_id, detail::json, org,
		policy_input::json, chain_id, chain_seq, chain_hash
	FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
		$9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::bigint[], $16::text[], $17::text[],
		$18::text[], $19::text[], $20::text[], $21::bigint[], $22::text[])
		AS r (id, time, ref, subject_kind, subject_ref, environment, decision, reasons, suggestions,
		obligations, bundle_revision, input_hash, runner, outcome, latency_micros, parent_id, detail, org,
		policy_input, chain_id, chain_seq, chain_hash)
), heads AS (
	INSERT INTO audit_chain_heads AS h (chain_id, seq, hash, updated_at, mac)
	SELECT chain_id, seq, hash, $26, mac FROM unnest($23::text[], $24::bigint[], $25::text[], $31::text[]) AS l (chain_id, seq, hash, mac)
	ON CONFLICT (chain_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, updated_at = excluded.updated_at, mac = excluded.mac
	WHERE excluded.seq > h.seq
), counts AS (
	INSERT INTO rate_counters AS c (key, window_no, count, expires_at)
	SELECT * FROM unnest($27::text[], $28::bigint[], $29::bigint[], $30::timestamptz[])
	ON CONFLICT (key, window_no) DO UPDATE SET count = excluded.count WHERE excluded.count > c.count
)
SELECT 1`

// AppendAudits implements store.Store (see AppendAuditsWithUsage).
func (s *Store) AppendAudits(ctx context.Context, rs []store.AuditRecord) error {
	return s.AppendAuditsWithUsage(ctx, rs, nil)
}

// AppendAuditsWithUsage implements store.Store: the records, their chains' heads and the
// counters in one statement (appendBatch).
func (s *Store) AppendAuditsWithUsage(ctx context.Context, rs []store.AuditRecord, usage []store.UsageCount) error {
	if len(rs) == 0 {
		return s.SaveUsage(ctx, usage)
	}
	op, err := sqlstore.CheckBatch(rs, usage)
	if err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, appendBatch, batchArgs(rs, usage)...); err != nil {
		return fmt.Errorf("%s: %w", op, wrap(err))
	}
	return nil
}

// batchArgs are appendBatch's arguments: the records' columns, the last link of each chain,
// the time of the heads' update, the counters' columns, the heads' MACs.
func batchArgs(rs []store.AuditRecord, usage []store.UsageCount) []any {
	n := len(rs)
	var (
		text  = make([][]string, 14) // the text columns, in the order of the loop below
		docs  = make([][][]byte, 5)  // reasons, suggestions, obligations, detail, policy_input: nil is NULL
		times = make([]time.Time, n)
		lat   = make([]int64, n)
		seqs  = make([]int64, n)
	)
	for i := range text {
		text[i] = make([]string, n)
	}
	for i := range docs {
		docs[i] = make([][]byte, n)
	}
	for i, r := range rs {
		for j, v := range [...]string{r.ID, r.Ref, r.SubjectKind, r.SubjectRef, r.Environment, r.Decision, r.BundleRevision,
			r.InputHash, r.Runner, r.Outcome, r.ParentID, r.Org, r.Chain.ChainID, r.Chain.Hash} {
			text[j][i] = v
		}
		for j, d := range [...][]byte{r.Reasons, r.Suggestions, r.Obligations, r.Detail, r.PolicyInput} {
			if len(d) > 0 {
				docs[j][i] = d
			}
		}
		times[i], lat[i], seqs[i] = store.Stamp(r.Time), r.LatencyMicros, r.Chain.Seq
	}
	heads := sqlstore.LastLinks(rs)
	hID, hSeq, hHash, hMAC := make([]string, 0, len(heads)), make([]int64, 0, len(heads)), make([]string, 0, len(heads)), make([]string, 0, len(heads))
	for id, l := range heads {
		hID, hSeq, hHash, hMAC = append(hID, id), append(hSeq, l.Seq), append(hHash, l.Hash), append(hMAC, l.HeadMAC)
	}
	cKey, cWin, cCount, cExp := make([]string, len(usage)), make([]int64, len(usage)), make([]int64, len(usage)), make([]time.Time, len(usage))
	for i, c := range usage {
		cKey[i], cWin[i], cCount[i], cExp[i] = c.Key, c.Window, c.Count, c.Expires.UTC()
	}
	return []any{
		text[0], times, text[1], text[2], text[3], text[4], text[5], // id, time, ref, subject_kind, subject_ref, environment, decision
		docs[0], docs[1], docs[2], // reasons, suggestions, obligations
		text[6], text[7], text[8], text[9], lat, text[10], docs[3], text[11], // bundle_revision … org
		docs[4], text[12], seqs, text[13], // policy_input, chain_id, chain_seq, chain_hash
		hID, hSeq, hHash, store.Stamp(time.Time{}),
		cKey, cWin, cCount, cExp,
		hMAC,
	}
}
