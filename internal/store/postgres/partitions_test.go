package postgres

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/sqlstore"
	"github.com/xemahq/xema/internal/testpg"
)

const partitionMigration = "0018_audit_partitions"

var chainKey = []byte("partition test chain key")

// chained returns n records of chain id from seq `from` on, at `at` plus step apart, each
// linked to the one before (prev: the link before the first).
func chained(id string, from int64, prev string, at time.Time, step time.Duration, n int) []store.AuditRecord {
	rs := make([]store.AuditRecord, n)
	for i := range rs {
		r := store.AuditRecord{ID: fmt.Sprintf("inv_%s_%06d", id, from+int64(i)), Time: at.Add(time.Duration(i) * step),
			Ref: "kb:page.read@1", SubjectKind: "agent", SubjectRef: "agent:support-bot", Environment: "project",
			Decision: "allowed", Reasons: json.RawMessage(`[]`), Detail: json.RawMessage(`{"n":` + fmt.Sprint(i) + `}`),
			Org: "default", Outcome: "ok", Runner: "http"}
		r.Chain = store.ChainLink{ChainID: id, Seq: from + int64(i)}
		r.Chain.Hash = audit.LinkHash(chainKey, prev, r)
		prev = r.Chain.Hash
		rs[i] = r
	}
	return rs
}

// partitions lists audit_log's partitions by name.
func partitions(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'audit_log'::regclass ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func partName(d time.Time) string { return "audit_log_p" + d.UTC().Format("20060102") }

func verified(t *testing.T, s store.Store) audit.VerifyResult {
	t.Helper()
	v, err := audit.Verify(context.Background(), s, [][]byte{chainKey}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestAuditPartitionsPrune: a prune drops the day partitions wholly beneath its checkpoints
// and deletes the rest in batches (the boundary's day, the DEFAULT partition); the archive
// verifies alone, the live log from the checkpoints; an altered archive and an altered live
// record are still detected.
func TestAuditPartitionsPrune(t *testing.T) {
	s := open(t).(rawStore)
	ctx := context.Background()
	today := day(time.Now())
	first := today.Add(-5 * 24 * time.Hour)
	// Two days without records, dropped first.
	empty := first.Add(-2 * 24 * time.Hour)
	if n, err := s.EnsureAuditPartitions(ctx, empty, today); err != nil || n != 7 { // today's exists since Open
		t.Fatalf("EnsureAuditPartitions = %d, %v; want the 7 past days", n, err)
	}
	// Chain a: 5 days, 40 records a day; chain b: 2 records a day. The DEFAULT partition
	// gets what no day partition covers: an unchained legacy record older than every
	// chain, and chain c's record 40 days ahead.
	a := chained("ch_a", 1, "", first.Add(time.Hour), 3*time.Hour/5, 200) // 200 × 36 min: 5 days
	b := chained("ch_b", 1, "", first.Add(2*time.Hour), 12*time.Hour, 10)
	c := chained("ch_c", 1, "", today.Add(40*24*time.Hour), 0, 1)
	old := store.AuditRecord{ID: "inv_old", Time: first.Add(-40 * 24 * time.Hour), Decision: "allowed", Org: "default"}
	for _, batch := range [][]store.AuditRecord{a, b, c, {old}} {
		if err := s.AppendAudits(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	var inDefault int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM audit_log_default`).Scan(&inDefault); err != nil || inDefault != 2 {
		t.Fatalf("DEFAULT partition holds %d records, %v; want the 2 no day partition covers", inDefault, err)
	}

	// The boundary: the middle of the 4th day. Days 1-3 drop whole, day 4 in batches.
	before := first.Add(3*24*time.Hour + 12*time.Hour)
	var want int64
	for _, r := range append(append(slices.Clone(a), b...), old) {
		if r.Time.Before(before) {
			want++
		}
	}
	rolledUp(t, s) // the overview's rollups count the records before the prune
	var archive closingBuffer
	res, err := audit.Prune(ctx, s, [][]byte{chainKey}, audit.PruneOptions{Before: before, Archive: &archive, Batch: 7})
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != want || res.Archived != want || res.Chains != 2 {
		t.Fatalf("prune = %+v, want %d records deleted and archived over 2 chains", res, want)
	}
	got := partitions(t, s.Store)
	for d := empty; d.Before(today.Add(store.AuditPartitionsAhead * 24 * time.Hour)); d = d.Add(24 * time.Hour) {
		has := slices.Contains(got, partName(d))
		if dropped := d.Add(24*time.Hour).Compare(before) <= 0; has == dropped {
			t.Errorf("partition %s: present %v, want %v (partitions %v)", partName(d), has, !dropped, got)
		}
	}
	if !slices.Contains(got, "audit_log_default") || !slices.Contains(got, partName(before)) {
		t.Fatalf("partitions after the prune %v: the DEFAULT and the boundary's are kept", got)
	}
	rolledUp(t, s) // and after it: the dropped partitions' buckets were counted again
	if v := verified(t, s); !v.Verified || v.Pending != 0 || v.Records != 211-int(want-1) {
		t.Fatalf("verify after the prune = %+v, want %d records verified", v, 211-int(want-1))
	}
	ar, err := audit.VerifyArchive(bytes.NewReader(archive.Bytes()), [][]byte{chainKey})
	if err != nil || len(ar.Breaks) != 0 || ar.Records != want {
		t.Fatalf("archive = %+v, %v; want %d records intact", ar, err, want)
	}
	altered := bytes.Replace(gunzip(t, archive.Bytes()), []byte(`"decision":"allowed"`), []byte(`"decision":"denied"`), 1)
	if ar, err := audit.VerifyArchive(bytes.NewReader(gzipped(t, altered)), [][]byte{chainKey}); err != nil || len(ar.Breaks) == 0 {
		t.Fatalf("an altered archive = %+v, %v; want a break", ar, err)
	}

	// A live record above the checkpoint, altered around the trigger.
	for _, q := range []string{
		`ALTER TABLE audit_log DISABLE TRIGGER audit_log_no_update_delete`,
		`UPDATE audit_log SET decision = 'denied' WHERE id = '` + a[len(a)-1].ID + `'`,
		`ALTER TABLE audit_log ENABLE TRIGGER audit_log_no_update_delete`,
	} {
		if err := s.ExecRaw(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if v := verified(t, s); v.Verified || len(v.Breaks) != 1 || !strings.Contains(v.Breaks[0].Problem, "hash mismatch") {
		t.Fatalf("verify of an altered live record = %+v, want a hash mismatch", v)
	}
}

// TestAuditPartitionDropRefused: a partition holding a record above its chain's checkpoint,
// or not beneath the prune boundary, is not dropped (by the prune or by hand); its records
// beneath the checkpoints are deleted in batches, the others kept.
func TestAuditPartitionDropRefused(t *testing.T) {
	s := open(t).(rawStore)
	ctx := context.Background()
	d := day(time.Now()).Add(-3 * 24 * time.Hour)
	if _, err := s.EnsureAuditPartitions(ctx, d, d); err != nil {
		t.Fatal(err)
	}
	rs := chained("ch_x", 1, "", d.Add(time.Hour), time.Minute, 10)
	if err := s.AppendAudits(ctx, rs); err != nil {
		t.Fatal(err)
	}
	dropByHand := `SELECT audit_log_drop_partition('` + partName(d) + `')`
	if err := s.ExecRaw(ctx, dropByHand); err == nil || !strings.Contains(err.Error(), "not beneath the prune boundary") {
		t.Fatalf("a drop before any prune = %v, want refused", err)
	}
	// The checkpoint at seq 6 (a boundary after the whole day, as if seqs 7-10 had come late).
	base := store.ChainHead{ChainID: "ch_x", BaseSeq: 6, BaseHash: rs[5].Chain.Hash, BaseMAC: audit.BaseMAC(chainKey, "ch_x", 6, rs[5].Chain.Hash)}
	if err := s.CheckpointPrune(ctx, store.PruneBoundary{Before: d.Add(48 * time.Hour), PrunedAt: time.Now()}, []store.ChainHead{base}); err != nil {
		t.Fatal(err)
	}
	if err := s.ExecRaw(ctx, dropByHand); err == nil || !strings.Contains(err.Error(), "above its prune checkpoint") {
		t.Fatalf("a drop of records above a checkpoint = %v, want refused", err)
	}
	var total int64
	for {
		n, err := s.DeletePrunedAudit(ctx, 4)
		if err != nil {
			t.Fatal(err)
		}
		if n > 4 {
			t.Fatalf("a batch of 4 deleted %d: the partition was dropped", n)
		}
		if total += n; n == 0 {
			break
		}
	}
	if total != 6 || !slices.Contains(partitions(t, s.Store), partName(d)) {
		t.Fatalf("deleted %d, partitions %v; want the 6 records beneath the checkpoint, the partition kept", total, partitions(t, s.Store))
	}
	if v := verified(t, s); !v.Verified || v.Records != 4 {
		t.Fatalf("verify = %+v, want the 4 records above the checkpoint", v)
	}
	if err := s.ExecRaw(ctx, `SELECT audit_log_drop_partition('audit_log_default')`); err == nil {
		t.Fatal("the DEFAULT partition was dropped")
	}
}

// TestAuditPartitionsAhead: Open creates the next store.AuditPartitionsAhead days' partitions; an
// append for a day without one lands in the DEFAULT partition, and creating that day's
// later skips it (its rows stay where they are) without failing; every partition refuses
// TRUNCATE, update and delete as the log does.
func TestAuditPartitionsAhead(t *testing.T) {
	s := open(t).(rawStore)
	ctx := context.Background()
	today := day(time.Now())
	got := partitions(t, s.Store)
	for i := range store.AuditPartitionsAhead {
		if p := partName(today.Add(time.Duration(i) * 24 * time.Hour)); !slices.Contains(got, p) {
			t.Errorf("partition %s not created at Open: %v", p, got)
		}
	}
	far := today.Add(30 * 24 * time.Hour)
	if err := s.AppendAudit(ctx, store.AuditRecord{ID: "inv_far", Time: far.Add(time.Hour), Decision: "allowed"}); err != nil {
		t.Fatalf("an append for a day without a partition: %v", err)
	}
	if n, err := s.EnsureAuditPartitions(ctx, far.Add(-24*time.Hour), far.Add(24*time.Hour)); err != nil || n != 2 {
		t.Fatalf("EnsureAuditPartitions over a day the DEFAULT partition holds = %d, %v; want the 2 others created", n, err)
	}
	if _, err := s.GetAudit(ctx, "inv_far"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnsureAuditPartitions(ctx, far, far.Add(-time.Hour*48)); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("EnsureAuditPartitions backwards = %v, want ErrInvalid", err)
	}
	if _, err := s.EnsureAuditPartitions(ctx, time.Time{}, far); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("EnsureAuditPartitions from the zero time = %v, want ErrInvalid", err)
	}
	if err := s.AppendAudit(ctx, store.AuditRecord{ID: "inv_today", Time: time.Now(), Decision: "allowed"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{partName(today), "audit_log_default", "audit_log"} {
		for _, q := range []string{"TRUNCATE " + p, "DELETE FROM " + p, "UPDATE " + p + " SET decision = 'denied'"} {
			if err := s.ExecRaw(ctx, q); err == nil || !strings.Contains(err.Error(), "append-only") {
				t.Errorf("%s = %v, want the append-only refusal", q, err)
			}
		}
	}
	for _, id := range []string{"inv_far", "inv_today"} {
		if r, err := s.GetAudit(ctx, id); err != nil || r.Decision != "allowed" {
			t.Fatalf("GetAudit(%s) after the refusals = %+v, %v", id, r, err)
		}
	}
	if err := s.AppendAudit(ctx, store.AuditRecord{ID: "inv_today", Time: time.Now(), Decision: "allowed"}); err != nil && !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a record appended again = %v, want ErrConflict", err)
	}
}

// TestAuditPartitionUpgrade: migration 0018 converts a log written before it, with its data:
// every row kept column for column, the same indexes under the same names, the chains still
// verifying, the append-only guards still holding, and the old rows pruned like new ones.
func TestAuditPartitionUpgrade(t *testing.T) {
	ctx := context.Background()
	dsn := testpg.NewDatabase(t)
	pool, db, err := connect(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	defer db.Close()
	ms, err := sqlstore.Migrations("postgres")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE schema_migrations (version TEXT PRIMARY KEY, applied_at TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version >= partitionMigration {
			break
		}
		if _, err := pool.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("%s: %v", m.Version, err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO schema_migrations VALUES ($1, 'now')`, m.Version); err != nil {
			t.Fatal(err)
		}
	}
	// A log written before: 3 days of a chain, an unchained legacy record, and today's.
	// This code writes heads' MACs (migration 0021): the column is there only while it writes.
	pre := sqlstore.New(stdlib.OpenDBFromPool(pool), Dialect)
	now := time.Now().UTC()
	rs := chained("ch_old", 1, "", now.Add(-72*time.Hour), time.Hour, 72)
	rs = append(rs, store.AuditRecord{ID: "inv_unchained", Time: now.Add(-100 * time.Hour), Decision: "denied", Org: "default",
		Reasons: json.RawMessage(`[{"code":"MISSING_GRANT"}]`)})
	if _, err := pool.Exec(ctx, `ALTER TABLE audit_chain_heads ADD COLUMN mac text NOT NULL DEFAULT ''`); err != nil {
		t.Fatal(err)
	}
	if err := pre.AppendAudits(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE audit_chain_heads DROP COLUMN mac`); err != nil {
		t.Fatal(err)
	}
	dump := func() []string {
		var out []string
		rows, err := pool.Query(ctx, `SELECT row_to_json(a)::text FROM audit_log a ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	indexes := func() []string {
		rows, err := pool.Query(ctx, `SELECT c.relname || ' ' || regexp_replace(pg_get_indexdef(c.oid), '^.* USING ', '')
			FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid WHERE x.indrelid = 'audit_log'::regclass AND NOT x.indisprimary ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	rowsBefore, indexesBefore := dump(), indexes()
	if len(rowsBefore) != 73 || len(indexesBefore) < 6 {
		t.Fatalf("before: %d rows, indexes %v", len(rowsBefore), indexesBefore)
	}

	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatalf("Open (migrating %s): %v", partitionMigration, err)
	}
	defer s.Close()
	var kind string
	if err := pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'audit_log'::regclass`).Scan(&kind); err != nil || kind != "p" {
		t.Fatalf("audit_log relkind %q, %v; want p (partitioned)", kind, err)
	}
	if got := dump(); !reflect.DeepEqual(got, rowsBefore) {
		t.Fatalf("rows after the migration:\n%v\nbefore:\n%v", got, rowsBefore)
	}
	// Every index is kept (later migrations may add more).
	if got := indexes(); slices.ContainsFunc(indexesBefore, func(w string) bool { return !slices.Contains(got, w) }) {
		t.Fatalf("indexes after the migration %v, before %v", got, indexesBefore)
	}
	if got := partitions(t, s); !slices.Contains(got, "audit_log_legacy") || !slices.Contains(got, "audit_log_default") {
		t.Fatalf("partitions %v: want audit_log_legacy and audit_log_default", got)
	}
	raw := rawStore{s}
	for _, q := range []string{"TRUNCATE audit_log_legacy", "DELETE FROM audit_log_legacy", "UPDATE audit_log SET decision = 'x'", "TRUNCATE audit_log"} {
		if err := raw.ExecRaw(ctx, q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s after the migration = %v, want the append-only refusal", q, err)
		}
	}
	if v := verified(t, s); !v.Verified || v.Records != 72 || v.Legacy != 1 {
		t.Fatalf("verify after the migration = %+v", v)
	}
	// The chain goes on; the legacy partition prunes (in batches: its range reaches today).
	next := chained("ch_old", 73, rs[71].Chain.Hash, now, time.Millisecond, 2)
	if err := s.AppendAudits(ctx, next); err != nil {
		t.Fatal(err)
	}
	res, err := audit.Prune(ctx, s, [][]byte{chainKey}, audit.PruneOptions{Before: now.Add(-24 * time.Hour)})
	if err != nil || res.Deleted != 49 { // 48 chained (times -72h … -25h), the unchained one
		t.Fatalf("prune after the migration = %+v, %v; want 49 deleted", res, err)
	}
	if v := verified(t, s); !v.Verified || v.Records != 26 {
		t.Fatalf("verify after the prune = %+v", v)
	}
}

// closingBuffer is an archive in memory.
type closingBuffer struct{ bytes.Buffer }

func (*closingBuffer) Sync() error { return nil }

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestAuditBatchInOneStatement: a batch's records, its chains' heads and its counters are
// written by one statement (seen waiting on a locked head in pg_stat_activity): one round
// trip and one commit, every part or none.
func TestAuditBatchInOneStatement(t *testing.T) {
	s := open(t).(rawStore)
	ctx := context.Background()
	rs := chained("ch_one", 1, "", time.Now(), time.Millisecond, 3)
	if err := s.AppendAudits(ctx, rs[:1]); err != nil {
		t.Fatal(err)
	}
	// The lock is held, and the waiting statement looked for, on the other pool: the
	// main pool's idle connections may be held by its database/sql view.
	tx, err := s.counterPool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT 1 FROM audit_chain_heads WHERE chain_id = 'ch_one' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	count := store.UsageCount{Key: "k", Window: 1, Count: 3, Expires: time.Now().Add(time.Hour)}
	done := make(chan error, 1)
	go func() { done <- s.AppendAuditsWithUsage(ctx, rs[1:], []store.UsageCount{count}) }()
	var query string
	for query == "" {
		err := s.counterPool.QueryRow(ctx, `SELECT query FROM pg_stat_activity WHERE wait_event_type = 'Lock'`).Scan(&query)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Fatalf("the batch ended (%v) while its chain's head was locked", err)
		default:
		}
	}
	if !strings.HasPrefix(query, "WITH records AS") {
		t.Errorf("the batch waits in %q, want its one statement", query)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	heads, err := s.ChainHeads(ctx)
	if err != nil || len(heads) != 1 || heads[0].Seq != 3 || heads[0].Hash != rs[2].Chain.Hash {
		t.Fatalf("heads = %+v, %v; want seq 3", heads, err)
	}
	// A stored id: nothing of the batch lands, neither the new record, nor the head, nor the count.
	next := chained("ch_one", 4, rs[2].Chain.Hash, time.Now(), time.Millisecond, 1)
	later := count
	later.Count = 9
	if err := s.AppendAuditsWithUsage(ctx, append(next, rs[0]), []store.UsageCount{later}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a batch with a stored id = %v, want ErrConflict", err)
	}
	if heads, _ := s.ChainHeads(ctx); heads[0].Seq != 3 {
		t.Fatalf("a refused batch moved the head to %d", heads[0].Seq)
	}
	if counts, err := s.LoadUsage(ctx, time.Now()); err != nil || len(counts) != 1 || counts[0].Count != 3 {
		t.Fatalf("counters after a refused batch = %+v, %v; want the count 3", counts, err)
	}
	if _, err := s.GetAudit(ctx, next[0].ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused batch's record: %v, want ErrNotFound", err)
	}
}

// rolledUp runs the rollup pass and checks that the rollups' hourly buckets count exactly
// the chained records the log holds in them.
func rolledUp(t *testing.T, s rawStore) {
	t.Helper()
	ctx := context.Background()
	for { // a pass counts a bounded number of stale buckets again
		p, err := s.AdvanceAuditRollups(ctx, time.Now(), 1_000_000)
		if err != nil {
			t.Fatal(err)
		}
		if p.Recounted == 0 {
			break
		}
	}
	var logged, rolled int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE chain_id <> ''
		AND time >= to_timestamp((SELECT min(bucket) FROM audit_rollup WHERE grain = 3600) / 1e6)`).Scan(&logged); err != nil {
		t.Fatal(err)
	}
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(records), 0) FROM audit_rollup WHERE grain = 3600`).Scan(&rolled); err != nil {
		t.Fatal(err)
	}
	if logged == 0 || rolled != logged {
		t.Fatalf("the hourly rollups count %d records, the log holds %d in their range", rolled, logged)
	}
}
