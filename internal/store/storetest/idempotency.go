package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
		{"IdempotencyResultAcrossReleases", testIdempotencyAcrossReleases},
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
		Result: json.RawMessage(`{"kind":"ran","ran":{"output":{"x":1},"auditId":"inv_1","obligations":null}}`),
		Body:   json.RawMessage(`{"output":{"x":1},"auditId":"inv_1"}`), AuditID: "inv_1"}
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
	if !bytes.Equal(got.Result, done.Result) {
		t.Fatalf("stored result %s, want %s byte for byte", got.Result, done.Result)
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

// testIdempotencyAcrossReleases: during a rolling upgrade the previous release's replicas
// share the table. A key one of them completes has no result (its answer as sent only); a
// key one of them takes over once expired, with its own statement that knows nothing of the
// result column, loses the earlier call's result, so the next answer under the key is never
// the earlier call's.
func testIdempotencyAcrossReleases(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	legacy := store.IdempotencyCompletion{Org: "acme", Subject: "agent:bot", Key: "old", Status: 403,
		Body: json.RawMessage(`{"code":"DENIED","auditId":"deny_1"}`), AuditID: "deny_1"}
	if _, claimed, err := s.ClaimIdempotency(ctx, idemKey("old", now)); err != nil || !claimed {
		t.Fatal(claimed, err)
	}
	if err := s.CompleteIdempotency(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.ClaimIdempotency(ctx, idemKey("old", now))
	if err != nil || got.State != store.IdempotencyDone || got.Result != nil || got.Status != 403 ||
		!bytes.Equal(got.Body, legacy.Body) || got.AuditID != "deny_1" {
		t.Fatalf("a key completed without a result = %+v, %v; want its answer as sent and no result", got, err)
	}

	expired := idemKey("taken", now.Add(-48*time.Hour))
	if _, claimed, err := s.ClaimIdempotency(ctx, expired); err != nil || !claimed {
		t.Fatal(claimed, err)
	}
	first := store.IdempotencyCompletion{Org: "acme", Subject: "agent:bot", Key: "taken", Status: 200,
		Result: json.RawMessage(`{"kind":"ran","ran":{"output":1,"auditId":"inv_1","obligations":null}}`),
		Body:   json.RawMessage(`{"output":1,"auditId":"inv_1","obligations":null}`), AuditID: "inv_1"}
	if err := s.CompleteIdempotency(ctx, first); err != nil {
		t.Fatal(err)
	}
	// The previous release's take-over of the expired key (its times aside: a claim made
	// as of the first call's time reads the row back whatever its expiry).
	if err := s.(RawExecer).ExecRaw(ctx, `UPDATE idempotency_keys SET input_hash = 'h2', state = 'running', status = 0,
		body = NULL, audit_id = '' WHERE org = 'acme' AND subject = 'agent:bot' AND key = 'taken'`); err != nil {
		t.Fatal(err)
	}
	// ... and its completion, which writes the answer as sent only.
	if err := s.(RawExecer).ExecRaw(ctx, `UPDATE idempotency_keys SET state = 'done', status = 502,
		body = '{"code":"PROVIDER_ERROR","message":"provider answered HTTP 500"}'
		WHERE org = 'acme' AND subject = 'agent:bot' AND key = 'taken' AND state = 'running'`); err != nil {
		t.Fatal(err)
	}
	got, claimed, err := s.ClaimIdempotency(ctx, expired) // as of its first claim: not expired then
	if err != nil || claimed || got.InputHash != "h2" || got.Result != nil || got.Status != 502 ||
		!strings.Contains(string(got.Body), "PROVIDER_ERROR") {
		t.Fatalf("a key the previous release took over and completed = %s %d %s %s, %v, %v; want its answer as sent, "+
			"not the earlier call's result", got.InputHash, got.Status, got.Body, got.Result, claimed, err)
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
