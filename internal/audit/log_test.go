package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/sqlite"
)

// openStore is a real SQLite store in a fresh file; path lets a test take its write lock.
func openStore(t testing.TB) (st *sqlite.Store, path string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "xema.db")
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st, path
}

// startChain starts a registered chain under key, as the gateway does.
func startChain(t testing.TB, st Registry, key []byte) *Chain {
	t.Helper()
	c, err := StartChain(context.Background(), st, key)
	if err != nil {
		t.Fatalf("start chain: %v", err)
	}
	return c
}

// holdWriteLock takes SQLite's write lock on path from a connection of its own, so the
// log's writer blocks in its transaction while the test queues records behind it.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", sqlite.DSN(path))
	if err != nil {
		t.Fatalf("open lock connection: %v", err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("lock connection: %v", err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("take write lock: %v", err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
				t.Errorf("release write lock: %v", err)
			}
			conn.Close()
			db.Close()
		})
	}
	t.Cleanup(release)
	return release
}

// waitQueued polls until n records wait in the queue and, when n is 0, a writer has taken
// the earlier ones into its batch.
func waitQueued(t *testing.T, l *Log, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		queued, writing := len(l.queue), l.writing
		l.mu.Unlock()
		if queued == n && (n > 0 || writing) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d records never queued", n)
}

func record(id string) store.AuditRecord {
	return store.AuditRecord{ID: id, Ref: "kb:page.read@1", SubjectKind: "agent", SubjectRef: "agent:support-bot",
		Environment: "project", Decision: DecisionAllowed, Outcome: "dispatched",
		Reasons: []byte(`[]`), Detail: []byte(`{"subject":{"kind":"agent"}}`)}
}

// appendAsync starts Append of r and returns where its answer arrives.
func appendAsync(ctx context.Context, l *Log, r store.AuditRecord) <-chan error {
	done := make(chan error, 1)
	go func() { done <- l.Append(ctx, r) }()
	return done
}

func TestConcurrentAppendsAreDurableOnReturn(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxBatch int
		maxWait  time.Duration
	}{
		{"commit when idle", 0, 0},
		{"linger 1ms", 0, time.Millisecond},
		{"batches of 3", 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := openStore(t)
			l := &Log{Store: st, MaxBatch: tc.maxBatch, MaxWait: tc.maxWait}
			defer l.Close()
			ctx := context.Background()
			var wg sync.WaitGroup
			errs := make(chan error, 200)
			for i := range 200 {
				wg.Go(func() {
					r := record(fmt.Sprintf("inv_%d", i))
					if err := l.Append(ctx, r); err != nil {
						errs <- err
						return
					}
					// Readable the moment Append returns: the caller may answer with the id.
					if _, err := st.GetAudit(ctx, r.ID); err != nil {
						errs <- fmt.Errorf("GetAudit(%s) after Append: %w", r.ID, err)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

func TestBatchErrorFailsItsBatchOnly(t *testing.T) {
	st, path := openStore(t)
	ctx := context.Background()
	if err := st.AppendAudit(ctx, record("inv_stored")); err != nil {
		t.Fatalf("AppendAudit: %v", err)
	}
	l := &Log{Store: st, MaxBatch: 4}
	defer l.Close()
	release := holdWriteLock(t, path)
	first := appendAsync(ctx, l, record("inv_first"))
	waitQueued(t, l, 0) // the writer holds inv_first, blocked on the lock
	// Queued in this order: the second batch is inv_a, inv_b, inv_stored (a conflict), inv_c;
	// the third is inv_d, inv_e.
	ids := []string{"inv_a", "inv_b", "inv_stored", "inv_c", "inv_d", "inv_e"}
	answers := make(map[string]<-chan error)
	for i, id := range ids {
		answers[id] = appendAsync(ctx, l, record(id))
		waitQueued(t, l, i+1)
	}
	release()

	if err := <-first; err != nil {
		t.Fatalf("Append(inv_first): %v", err)
	}
	for _, id := range ids[:4] {
		if err := <-answers[id]; !errors.Is(err, store.ErrConflict) {
			t.Errorf("Append(%s) in the batch holding a stored id = %v, want ErrConflict", id, err)
		}
	}
	for _, id := range []string{"inv_a", "inv_b", "inv_c"} {
		if _, err := st.GetAudit(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetAudit(%s) of the refused batch = %v, want ErrNotFound", id, err)
		}
	}
	for _, id := range ids[4:] {
		if err := <-answers[id]; err != nil {
			t.Errorf("Append(%s) in the next batch: %v", id, err)
		}
		if _, err := st.GetAudit(ctx, id); err != nil {
			t.Errorf("GetAudit(%s): %v", id, err)
		}
	}
}

func TestInvalidRecordFailsOnlyItsCaller(t *testing.T) {
	st, path := openStore(t)
	ctx := context.Background()
	l := &Log{Store: st}
	defer l.Close()
	release := holdWriteLock(t, path)
	first := appendAsync(ctx, l, record("inv_first"))
	waitQueued(t, l, 0)
	valid := appendAsync(ctx, l, record("inv_valid"))
	waitQueued(t, l, 1)
	bad := record("inv_bad")
	bad.Decision = ""
	if err := l.Append(ctx, bad); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Append without decision = %v, want ErrInvalid", err)
	}
	release()
	for id, done := range map[string]<-chan error{"inv_first": first, "inv_valid": valid} {
		if err := <-done; err != nil {
			t.Errorf("Append(%s) beside an invalid record: %v", id, err)
		}
	}
}

func TestCancelledWaiterDropsNoRecord(t *testing.T) {
	st, path := openStore(t)
	l := &Log{Store: st}
	defer l.Close()
	release := holdWriteLock(t, path)
	first := appendAsync(context.Background(), l, record("inv_first"))
	waitQueued(t, l, 0)
	ctx, cancel := context.WithCancel(context.Background())
	leaving := appendAsync(ctx, l, record("inv_leaving"))
	waitQueued(t, l, 1)
	staying := appendAsync(context.Background(), l, record("inv_staying"))
	waitQueued(t, l, 2)
	cancel()
	// Answered while the write lock is still held: the caller does not wait for the batch.
	if err := <-leaving; !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with a cancelled context = %v, want context.Canceled", err)
	}
	release()
	for id, done := range map[string]<-chan error{"inv_first": first, "inv_staying": staying} {
		if err := <-done; err != nil {
			t.Errorf("Append(%s) beside a cancelled caller: %v", id, err)
		}
	}
	for _, id := range []string{"inv_first", "inv_leaving", "inv_staying"} {
		if _, err := st.GetAudit(context.Background(), id); err != nil {
			t.Errorf("GetAudit(%s): %v", id, err)
		}
	}
	if err := l.Append(canceled(), record("inv_late")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with a context already done = %v, want context.Canceled", err)
	}
	if _, err := st.GetAudit(context.Background(), "inv_late"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a record whose context was done before Append was queued: GetAudit = %v", err)
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestCloseFlushes(t *testing.T) {
	st, path := openStore(t)
	ctx := context.Background()
	l := &Log{Store: st, MaxBatch: 2}
	release := holdWriteLock(t, path)
	ids := []string{"inv_1", "inv_2", "inv_3", "inv_4", "inv_5"}
	answers := []<-chan error{appendAsync(ctx, l, record(ids[0]))}
	waitQueued(t, l, 0)
	for i, id := range ids[1:] {
		answers = append(answers, appendAsync(ctx, l, record(id)))
		waitQueued(t, l, i+1)
	}
	closed := make(chan struct{})
	go func() { l.Close(); close(closed) }()
	release()
	<-closed
	for _, id := range ids {
		if _, err := st.GetAudit(ctx, id); err != nil {
			t.Errorf("GetAudit(%s) once Close returned: %v", id, err)
		}
	}
	for i, done := range answers {
		if err := <-done; err != nil {
			t.Errorf("Append(%s): %v", ids[i], err)
		}
	}
	if err := l.Append(ctx, record("inv_after")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close = %v, want ErrClosed", err)
	}
}

func TestCloseEndsLinger(t *testing.T) {
	st, _ := openStore(t)
	l := &Log{Store: st, MaxWait: time.Hour} // only a full batch or Close ends the linger
	done := appendAsync(context.Background(), l, record("inv_1"))
	waitQueued(t, l, 1) // the writer lingers with inv_1
	l.Close()
	if err := <-done; err != nil {
		t.Fatalf("Append: %v", err)
	}
	if _, err := st.GetAudit(context.Background(), "inv_1"); err != nil {
		t.Fatalf("GetAudit once Close returned: %v", err)
	}
}

func TestFullBatchEndsLinger(t *testing.T) {
	st, _ := openStore(t)
	l := &Log{Store: st, MaxBatch: 2, MaxWait: time.Hour} // only a full batch or Close ends the linger
	defer l.Close()
	first := appendAsync(context.Background(), l, record("inv_1"))
	waitQueued(t, l, 1) // the writer lingers with inv_1
	if err := l.Append(context.Background(), record("inv_2")); err != nil {
		t.Fatalf("Append(inv_2): %v", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("Append(inv_1): %v", err)
	}
}
