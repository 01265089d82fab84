package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/xemahq/xema/internal/audit/prunebench"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/sqlstore"
	"github.com/xemahq/xema/internal/store/storetest"
	"github.com/xemahq/xema/internal/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// rawStore adds the suite's raw-SQL hook, straight on the engine's pool.
type rawStore struct{ *Store }

func (s rawStore) ExecRaw(ctx context.Context, q string) error {
	_, err := s.pool.Exec(ctx, q)
	return err
}

func TestAuditRollupsAcrossRestart(t *testing.T) {
	url := testpg.NewDatabase(t)
	storetest.AuditRollupsAcrossRestart(t, func() store.Store {
		s, err := Open(context.Background(), url)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
}

func open(t testing.TB) store.Store {
	t.Helper()
	s, err := Open(context.Background(), testpg.NewDatabase(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return rawStore{s}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

func BenchmarkStore(b *testing.B) { storetest.Bench(b, open) }

func TestAuditRefusesTruncate(t *testing.T) {
	s := open(t).(rawStore)
	ctx := context.Background()
	if err := s.AppendAudit(ctx, store.AuditRecord{ID: "a-1", Decision: "allowed"}); err != nil {
		t.Fatalf("AppendAudit: %v", err)
	}
	if err := s.ExecRaw(ctx, "TRUNCATE audit_log"); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Fatalf("TRUNCATE audit_log = %v, want the append-only refusal", err)
	}
	if _, err := s.GetAudit(ctx, "a-1"); err != nil {
		t.Fatalf("GetAudit after refused TRUNCATE: %v", err)
	}
}

// TestRevisionIsAnnounced shows replicas can LISTEN for policy changes instead of polling.
func TestRevisionIsAnnounced(t *testing.T) {
	url := testpg.NewDatabase(t)
	ctx := context.Background()
	s, err := Open(ctx, url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN xema_policy_revision"); err != nil {
		t.Fatal(err)
	}
	c := store.Capability{Ref: "kb:page.read@1", BiomeID: "demo", Manifest: []byte(`{}`), Lifecycle: store.LifecycleSeeded}
	if err := s.UpsertCapability(ctx, c); err != nil {
		t.Fatalf("UpsertCapability: %v", err)
	}
	n, err := conn.Conn().WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("WaitForNotification: %v", err)
	}
	rev, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Payload != "1" || rev != 1 {
		t.Fatalf("notified revision %q, stored %d; want 1 and 1", n.Payload, rev)
	}
}

// TestMigrateConcurrently shows replicas starting together apply each migration once.
func TestMigrateConcurrently(t *testing.T) {
	url := testpg.NewDatabase(t)
	const n = 4
	applied := make([][]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { applied[i], errs[i] = Migrate(context.Background(), url) })
	}
	wg.Wait()
	total := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Migrate %d: %v", i, errs[i])
		}
		total += len(applied[i])
	}
	all, err := sqlstore.Migrations("postgres")
	if err != nil {
		t.Fatal(err)
	}
	if total != len(all) {
		t.Fatalf("%d migrations applied by %d racing replicas, want each of the %d once", total, n, len(all))
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	url := testpg.NewDatabase(t)
	ctx := context.Background()
	applied, err := Migrate(ctx, url)
	if err != nil || len(applied) == 0 || applied[0] != "0001_init" {
		t.Fatalf("first Migrate = %v, %v; want 0001_init first", applied, err)
	}
	again, err := Migrate(ctx, url)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Migrate = %v, %v; want nothing", again, err)
	}
}

func TestOpenFailsClosed(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, dsn string
		want      error
	}{
		{"no server", "postgres://postgres:s3cret@127.0.0.1:1/x?connect_timeout=2&sslmode=disable", store.ErrUnavailable},
		{"not a DSN", "postgres://u:s3cret@[::1/x", store.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(ctx, tc.dsn)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open = %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("the error repeats the password: %v", err)
			}
		})
	}
}

// TestCountersCommitAsynchronously: the counters run on sessions of their own that commit
// without waiting for the WAL flush (the test server itself runs without fsync, so the
// other pool's setting says nothing here); an increment is seen at once through the other
// pool (exact across connections and replicas).
func TestCountersCommitAsynchronously(t *testing.T) {
	s := open(t).(rawStore)
	ctx := context.Background()
	var setting string
	if err := s.counterPool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&setting); err != nil || setting != "off" {
		t.Errorf("counter sessions: synchronous_commit = %q, %v; want off", setting, err)
	}
	// A row lock held on the main pool makes AddUsage wait inside its statement: the
	// waiting session, seen in pg_stat_activity, is the counter pool's.
	add := store.UsageAdd{Key: "k", Window: 1, N: 1, Limit: 5, Expires: time.Now().Add(time.Hour)}
	if _, refused, err := s.AddUsage(ctx, []store.UsageAdd{add}); err != nil || refused >= 0 {
		t.Fatalf("AddUsage: refused %d, %v", refused, err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // on a failed check; a no-op after the one below
	if _, err := tx.Exec(ctx, "SELECT 1 FROM rate_counters WHERE key = 'k' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := s.AddUsage(ctx, []store.UsageAdd{add})
		done <- err
	}()
	waiting := waitingOnLock(t, s.Store, done, `SELECT application_name FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND query LIKE 'WITH adds%'`)
	if waiting != counterSessions {
		t.Errorf("AddUsage ran on a session named %q, want %q", waiting, counterSessions)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("AddUsage: %v", err)
	}
	counts, err := s.LoadUsage(ctx, time.Now())
	if err != nil || len(counts) != 1 || counts[0].Count != 2 {
		t.Fatalf("LoadUsage through the main pool = %+v, %v; want the count 2", counts, err)
	}
}

// TestCountersSurviveServerCrash: a call's counters' increment (one statement for its rate
// limit and quota) commits asynchronously, and the decision record committed after it
// flushes the WAL past it, so a crash of the server (no WAL flush) right after the record
// keeps the counts. Durable server: fsync and
// synchronous commit on.
func TestCountersSurviveServerCrash(t *testing.T) {
	srv, err := testpg.StartServer()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	}()
	dsn, err := srv.CreateDatabase("crash")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(time.Hour)
	for i := range 20 { // the call's counts (its rate limit and quota, in one statement), then its decision record, as the funnel does
		rate := store.UsageAdd{Key: fmt.Sprintf("k%d", i), Window: 1, N: 1, Limit: 5, Expires: expires}
		quota := store.UsageAdd{Key: fmt.Sprintf("q%d", i), Window: 1, N: 1, Limit: 5, Expires: expires}
		if _, refused, err := s.AddUsage(ctx, []store.UsageAdd{rate, quota}); err != nil || refused >= 0 {
			t.Fatalf("AddUsage: refused %d, %v", refused, err)
		}
		if err := s.AppendAudit(ctx, store.AuditRecord{ID: fmt.Sprintf("inv_%d", i), Decision: "allowed"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Crash(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	counts, err := s.LoadUsage(ctx, time.Now())
	if err != nil || len(counts) != 40 {
		t.Fatalf("after the crash: %d counters, %v; want the 20 calls' rate and quota counted before a committed record", len(counts), err)
	}
}

// TestUsageAddsInOneStatement: a call's rate limit and quota are added by one statement
// (seen waiting on a locked counter in pg_stat_activity), every counter or none: a refusal
// names the counter and adds nothing, and concurrent adders pass no limit, the counters
// moving together.
func TestUsageAddsInOneStatement(t *testing.T) {
	s := open(t).(rawStore)
	ctx := context.Background()
	exp := time.Now().Add(time.Hour)
	rate := store.UsageAdd{Key: "rate", Window: 7, N: 1, Limit: 50, Expires: exp}
	quota := store.UsageAdd{Key: "quota", Window: 1, N: 1, Limit: 1000, Expires: exp}
	if counts, refused, err := s.AddUsage(ctx, []store.UsageAdd{rate, quota}); err != nil || refused >= 0 || !slices.Equal(counts, []int64{1, 1}) {
		t.Fatalf("AddUsage = %v, refused %d, %v; want [1 1]", counts, refused, err)
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT 1 FROM rate_counters WHERE key = 'rate' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := s.AddUsage(ctx, []store.UsageAdd{rate, quota})
		done <- err
	}()
	query := waitingOnLock(t, s.Store, done, `SELECT query FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND application_name = $1`, counterSessions)
	if !strings.HasPrefix(query, "WITH adds") {
		t.Errorf("AddUsage of two counters waits in %q, want the one statement", query)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	var ok atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				_, refused, err := s.AddUsage(ctx, []store.UsageAdd{rate, quota})
				if err != nil {
					t.Error(err)
					return
				}
				if refused < 0 {
					ok.Add(1)
				} else if refused != 0 {
					t.Errorf("refused %d, want the rate limit (0)", refused)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 48 { // 2 counted before, limit 50
		t.Errorf("%d concurrent adds passed, want 48", ok.Load())
	}
	counts, err := s.LoadUsage(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, c := range counts {
		got[c.Key] = c.Count
	}
	if got["rate"] != 50 || got["quota"] != 50 {
		t.Fatalf("counters %v, want rate 50 and quota 50: a refused call added nothing", got)
	}
}

// waitingOnLock polls pg_stat_activity with q (one column of the session waiting on a lock)
// until it names one, and returns it; an AddUsage ending on done first (it was not blocked)
// fails the test.
func waitingOnLock(t *testing.T, s *Store, done <-chan error, q string, args ...any) string {
	t.Helper()
	for {
		var found string
		err := s.pool.QueryRow(context.Background(), q, args...).Scan(&found)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if found != "" {
			return found
		}
		select {
		case err := <-done:
			t.Fatalf("AddUsage ended (%v) while the counter was locked", err)
		default:
		}
	}
}

// BenchmarkAppendDuringPrune: go test -run '^$' -bench AppendDuringPrune -benchtime 1x
// (XEMA_PRUNE_BENCH_RECORDS sets the log's size, default 1,000,000).
func BenchmarkAppendDuringPrune(b *testing.B) {
	prunebench.BenchAppendDuringPrune(b, open(b), prunebench.PruneBenchRecords(), 16)
}

// BenchmarkAuditStats: go test -run '^$' -bench AuditStats -benchtime 1x
// (XEMA_STATS_BENCH_RECORDS sets the log's size, default 200,000).
func BenchmarkAuditStats(b *testing.B) {
	storetest.BenchAuditStats(b, open(b), storetest.StatsBenchRecords())
}
