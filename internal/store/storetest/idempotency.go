package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// runCrashSafety is the conformance of idempotency keys, approval leases and the write probe.
func runCrashSafety(t *testing.T, open func(t *testing.T) store.Store) {
	runSubtests(t, open, []subtest{
		{"IdempotencyClaimReplay", testIdempotencyClaimReplay},
		{"IdempotencyConcurrentOneWinner", testIdempotencyConcurrent},
		{"IdempotencyExpiryAndPrune", testIdempotencyExpiry},
		{"ApprovalLeaseAndStale", testApprovalLease},
		{"ProbeWrite", testProbeWrite},
	})
}

func idemKey(key string, now time.Time) store.IdempotencyRecord {
	return store.IdempotencyRecord{Org: "acme", Subject: "agent:bot", Key: key, InputHash: "h1", AuditID: "",
		CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour)}
}

func testIdempotencyClaimReplay(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	if _, _, err := s.ClaimIdempotency(ctx, store.IdempotencyRecord{Org: "acme", Key: "k"}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("claim without subject: %v, want ErrInvalid", err)
	}
	if _, _, err := s.ClaimIdempotency(ctx, store.IdempotencyRecord{Subject: "agent:bot", Key: "k", InputHash: "h1",
		CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("claim without org: %v, want ErrInvalid (keys are scoped by org)", err)
	}
	r := idemKey("k1", now)
	got, claimed, err := s.ClaimIdempotency(ctx, r)
	if err != nil || !claimed || got.State != store.IdempotencyRunning {
		t.Fatalf("first claim = %+v, %v, %v", got, claimed, err)
	}
	again := r
	again.InputHash = "h2"
	got, claimed, err = s.ClaimIdempotency(ctx, again)
	if err != nil || claimed || got.State != store.IdempotencyRunning || got.InputHash != "h1" {
		t.Fatalf("second claim = %+v, %v, %v; want the stored running key with h1", got, claimed, err)
	}
	// Another subject or org has keys of its own.
	other := r
	other.Subject = "agent:other"
	if _, claimed, err := s.ClaimIdempotency(ctx, other); err != nil || !claimed {
		t.Fatalf("other subject: %v, %v", claimed, err)
	}
	otherOrg := r
	otherOrg.Org = "globex"
	if _, claimed, err := s.ClaimIdempotency(ctx, otherOrg); err != nil || !claimed {
		t.Fatalf("other org: %v, %v", claimed, err)
	}
	done := store.IdempotencyCompletion{Org: "acme", Subject: "agent:bot", Key: "k1", Status: 200,
		Body: json.RawMessage(`{"output":{"x":1},"auditId":"inv_1"}`), AuditID: "inv_1"}
	if err := s.CompleteIdempotency(ctx, done); err != nil {
		t.Fatal(err)
	}
	if err := s.CompleteIdempotency(ctx, done); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second completion: %v, want ErrConflict", err)
	}
	missing := done
	missing.Key = "nope"
	if err := s.CompleteIdempotency(ctx, missing); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("completion of an unknown key: %v, want ErrNotFound", err)
	}
	got, claimed, err = s.ClaimIdempotency(ctx, r)
	if err != nil || claimed || got.State != store.IdempotencyDone || got.Status != 200 || got.AuditID != "inv_1" {
		t.Fatalf("claim after completion = %+v, %v, %v", got, claimed, err)
	}
	var body, want any
	_ = json.Unmarshal(got.Body, &body)
	_ = json.Unmarshal(done.Body, &want)
	if fmt.Sprint(body) != fmt.Sprint(want) {
		t.Fatalf("stored body %s, want %s", got.Body, done.Body)
	}
	// Release only frees a running key.
	if err := s.ReleaseIdempotency(ctx, "acme", "agent:bot", "k1"); err != nil {
		t.Fatal(err)
	}
	if got, claimed, _ := s.ClaimIdempotency(ctx, r); claimed || got.State != store.IdempotencyDone {
		t.Fatalf("release freed a done key: %+v", got)
	}
	if err := s.ReleaseIdempotency(ctx, "acme", "agent:other", "k1"); err != nil {
		t.Fatal(err)
	}
	if _, claimed, err := s.ClaimIdempotency(ctx, other); err != nil || !claimed {
		t.Fatalf("claim after release: %v, %v", claimed, err)
	}
}

func testIdempotencyConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, claimed, err := s.ClaimIdempotency(ctx, idemKey("race", now)); err != nil {
				t.Errorf("claim: %v", err)
			} else if claimed {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d claimers won, want 1", wins.Load())
	}
}

func testIdempotencyExpiry(t *testing.T, s store.Store) {
	ctx := context.Background()
	old := time.Now().UTC().Add(-48 * time.Hour)
	if _, claimed, err := s.ClaimIdempotency(ctx, idemKey("old", old)); err != nil || !claimed {
		t.Fatal(claimed, err)
	}
	if _, claimed, err := s.ClaimIdempotency(ctx, idemKey("old2", old)); err != nil || !claimed {
		t.Fatal(claimed, err)
	}
	fresh := idemKey("old", time.Now().UTC())
	fresh.InputHash = "h-new"
	got, claimed, err := s.ClaimIdempotency(ctx, fresh)
	if err != nil || !claimed || got.InputHash != "h-new" {
		t.Fatalf("claim over an expired key = %+v, %v, %v; want a new claim", got, claimed, err)
	}
	for _, bad := range []int{0, -1} {
		if n, err := s.PruneIdempotency(ctx, time.Now(), bad); !errors.Is(err, store.ErrInvalid) || n != 0 {
			t.Fatalf("prune with limit %d = %d, %v; want ErrInvalid and nothing deleted", bad, n, err)
		}
	}
	n, err := s.PruneIdempotency(ctx, time.Now(), 10)
	if err != nil || n != 1 {
		t.Fatalf("prune = %d, %v; want the one expired key", n, err)
	}
	if _, claimed, _ := s.ClaimIdempotency(ctx, fresh); claimed {
		t.Fatal("prune removed a live key")
	}
}

func testApprovalLease(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, id := range []string{"apr_a", "apr_b", "apr_c"} {
		if err := s.PutApproval(ctx, newApproval(id, "kb:page.read@1", "agent:bot", now)); err != nil {
			t.Fatal(err)
		}
	}
	// apr_a: approved and claimed by r1 for a minute.
	a, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_a", From: store.ApprovalPending, To: store.ApprovalApproved,
		At: now, Live: true, DecidedBy: "user:alice", Claim: "r1", LeaseUntil: now.Add(time.Minute)})
	if err != nil || a.ClaimedBy != "r1" || !a.LeaseUntil.Equal(now.Add(time.Minute)) {
		t.Fatalf("claim = %+v, %v", a, err)
	}
	// Only the holder moves it on.
	if _, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_a", From: store.ApprovalApproved, To: store.ApprovalRunning,
		At: now, Holder: "r2"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("move by another holder: %v, want ErrConflict", err)
	}
	if _, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_a", From: store.ApprovalApproved, To: store.ApprovalRunning,
		At: now, Holder: "r1", LeaseUntil: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// apr_b: dispatched by r2 whose lease has ended.
	for _, tr := range []store.ApprovalTransition{
		{ID: "apr_b", From: store.ApprovalPending, To: store.ApprovalApproved, At: now, Claim: "r2", LeaseUntil: now.Add(-time.Minute)},
		{ID: "apr_b", From: store.ApprovalApproved, To: store.ApprovalRunning, At: now, Holder: "r2"},
		{ID: "apr_b", From: store.ApprovalRunning, To: store.ApprovalDispatched, At: now, Holder: "r2"},
	} {
		if _, err := s.TransitionApproval(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	stale, err := s.StaleApprovals(ctx, "r3", now, 10)
	if err != nil || len(stale) != 1 || stale[0].ID != "apr_b" || stale[0].Status != store.ApprovalDispatched {
		t.Fatalf("stale for r3 = %+v, %v; want apr_b only (apr_a's lease holds, apr_c is pending)", stale, err)
	}
	stale, err = s.StaleApprovals(ctx, "r1", now, 10)
	if err != nil || len(stale) != 2 {
		t.Fatalf("stale for r1 = %+v, %v; want its own apr_a and the expired apr_b", stale, err)
	}
	stale, err = s.StaleApprovals(ctx, "", now, 10)
	if err != nil || len(stale) != 1 || stale[0].ID != "apr_b" {
		t.Fatalf("stale for no holder = %+v, %v; want the expired apr_b only", stale, err)
	}
	// Recovery: back to pending with the decision and claim cleared.
	back, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_a", From: store.ApprovalRunning, To: store.ApprovalPending,
		At: now, Holder: "r1", Reset: true, Reason: "recovered"})
	if err != nil || back.Status != store.ApprovalPending || back.DecidedBy != "" || back.ClaimedBy != "" || back.LeaseUntil.After(now) {
		t.Fatalf("reset = %+v, %v", back, err)
	}
	end, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_b", From: store.ApprovalDispatched, To: store.ApprovalInterrupted,
		At: now, Holder: "r2", Outcome: "OUTCOME_UNKNOWN"})
	if err != nil || end.Status != store.ApprovalInterrupted || end.Outcome != "OUTCOME_UNKNOWN" {
		t.Fatalf("interrupt = %+v, %v", end, err)
	}
	if stale, err := s.StaleApprovals(ctx, "r1", now, 10); err != nil || len(stale) != 0 {
		t.Fatalf("stale after recovery = %+v, %v", stale, err)
	}
}

func testProbeWrite(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.ProbeWrite(ctx, "", time.Now()); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("probe of no replica: %v, want ErrInvalid", err)
	}
	for range 3 {
		if err := s.ProbeWrite(ctx, "r1", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
}
