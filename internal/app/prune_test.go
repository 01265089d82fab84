package app

import (
	"context"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/ratelimit"
	"github.com/xemahq/xema/internal/store"
)

// PruneRateCounters deletes the counter of a window that ended long ago, keeps a live one,
// and returns once its context ends.
func TestPruneRateCounters(t *testing.T) {
	ctx := context.Background()
	a, err := New(ctx, Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ended := store.UsageAdd{Key: "ended", Window: 1, N: 1, Limit: 1, Expires: time.Now().Add(-ratelimit.PruneGrace - time.Hour)}
	live := store.UsageAdd{Key: "live", Window: 1, N: 1, Limit: 1, Expires: time.Now().Add(time.Hour)}
	if _, refused, err := a.Store.AddUsage(ctx, []store.UsageAdd{ended, live}); err != nil || refused >= 0 {
		t.Fatalf("fill counters: refused %d err %v", refused, err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.PruneRateCounters(runCtx, 10*time.Millisecond)
	}()
	// The ended counter is full (1 of 1) until it is pruned; then the add starts a new row.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, refused, err := a.Store.AddUsage(ctx, []store.UsageAdd{ended})
		if err != nil {
			t.Fatal(err)
		}
		if refused < 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the ended window's counter was never pruned")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	if _, refused, err := a.Store.AddUsage(ctx, []store.UsageAdd{live}); err != nil || refused != 0 {
		t.Fatalf("live counter after pruning: refused %d err %v; want still full", refused, err)
	}
}

// On the embedded store the counters live in memory and a restart resumes them: a window
// spent before a clean shutdown is still spent after the next start.
func TestRateCountsSurviveRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	key := ratelimit.Key{Org: "acme", Ref: "kb:page.read@1", Subject: "agent:bot", Environment: "project"}
	obs := []policy.Obligation{{Kind: ratelimit.KindQuota, Requests: 2, Per: "24h"}}
	for start, want := range []bool{true, true, false} { // admitted?
		a, err := New(ctx, Config{DataDir: dir, OperatorOrg: "default"})
		if err != nil {
			t.Fatal(err)
		}
		if a.counters == nil || a.Audit.Usage != a.counters {
			t.Fatal("SQLite: want the counters in memory, saved with the audit log's batches")
		}
		u, err := (&ratelimit.Limiter{Counter: a.counters}).Take(ctx, key, obs)
		if err != nil {
			t.Fatal(err)
		}
		if (u == nil) != want {
			t.Fatalf("start %d: usage %+v, want admitted %v (a quota of 2 across restarts)", start+1, u, want)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// --audit-retain: one tick prunes the records older than the retention through the
// gateway's own chain keys, keeps the newer ones, and the log still verifies.
func TestPruneAuditRetention(t *testing.T) {
	ctx := context.Background()
	a, err := New(ctx, Config{DataDir: t.TempDir(), AuditRetain: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	now := time.Now()
	for i, at := range []time.Time{now.Add(-72 * time.Hour), now.Add(-48 * time.Hour), now.Add(-time.Hour)} {
		r := store.AuditRecord{ID: audit.NewID("inv_"), Time: at, Ref: "kb:page.read@1", Decision: audit.DecisionAllowed,
			Reasons: []byte(`[]`), Outcome: "ok", LatencyMicros: int64(i)}
		if err := a.Audit.Append(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	a.pruneAudit(ctx, now)
	var left int
	if err := a.Store.ScanAudit(ctx, store.AuditFilter{}, func(store.AuditRecord) error { left++; return nil }); err != nil {
		t.Fatal(err)
	}
	if left != 1 {
		t.Fatalf("%d records left, want the one within the retention", left)
	}
	res, err := audit.Verify(ctx, a.Store, a.chainKeys, time.Time{})
	if err != nil || !res.Verified || res.Pruned.Before.IsZero() {
		t.Fatalf("verify after the retention's prune = %+v, %v", res, err)
	}
}
