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

// runObligations is the conformance of store.ObligationStore: approvals move by
// compare-and-set and usage counters never pass their limit, however many callers race.
func runObligations(t *testing.T, open func(t *testing.T) store.Store) {
	runSubtests(t, open, []subtest{
		{"ApprovalRoundTrip", testApprovalRoundTrip},
		{"ApprovalInvalid", testApprovalInvalid},
		{"ApprovalList", testApprovalList},
		{"ApprovalTransitions", testApprovalTransitions},
		{"ApprovalExpiry", testApprovalExpiry},
		{"ApprovalWithdrawnAndAnswer", testApprovalWithdrawnAndAnswer},
		{"CountPendingApprovals", testCountPendingApprovals},
		{"ApprovalOnePendingPerCall", testApprovalOnePendingPerCall},
		{"ApprovalConcurrentApproveOneWinner", testApprovalConcurrent},
		{"UsageSaveLoad", testUsageSaveLoad},
		{"UsageWithAuditBatch", testUsageWithAuditBatch},
	})
	RunCounter(t, func(t *testing.T) Counter { return open(t) })
}

// Counter is what holds usage counters: every store, and ratelimit.Memory.
type Counter interface {
	AddUsage(ctx context.Context, adds []store.UsageAdd) (counts []int64, refused int, err error)
	PruneUsage(ctx context.Context, before time.Time, limit int) (int64, error)
}

// RunCounter is the conformance of a usage counter: exact under concurrency, all or none,
// pruned in bounded batches. open returns a new empty counter for each subtest.
func RunCounter(t *testing.T, open func(t *testing.T) Counter) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, c Counter)
	}{
		{"UsageLimit", testUsageLimit},
		{"UsageConcurrentNeverPassesLimit", testUsageConcurrent},
		{"UsageAllOrNothing", testUsageAllOrNothing},
		{"UsagePrune", testUsagePrune},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}

func newApproval(id, ref, requester string, created time.Time) store.Approval {
	return store.Approval{ID: id, Org: "acme", AuditID: "inv_" + id, Ref: ref, Biome: "demo", RequesterRef: requester,
		Environment: "project", Exec: json.RawMessage(`{"subject":{"kind":"agent","ref":"` + requester + `"}}`),
		Input: json.RawMessage(`{"pageId":"welcome"}`), Status: store.ApprovalPending,
		CreatedAt: created, ExpiresAt: created.Add(time.Hour)}
}

func testApprovalRoundTrip(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	a := newApproval("apr_1", "kb:page.read@1", "agent:bot", now)
	if err := s.PutApproval(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetApproval(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Ref != a.Ref || got.RequesterRef != a.RequesterRef || string(got.Input) != string(a.Input) ||
		string(got.Exec) != string(a.Exec) || got.Status != store.ApprovalPending || !got.CreatedAt.Equal(now) ||
		!got.ExpiresAt.Equal(a.ExpiresAt) || got.Output != nil {
		t.Fatalf("round trip: got %+v, want %+v", got, a)
	}
	if err := s.PutApproval(ctx, a); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second put of %s: %v, want ErrConflict", a.ID, err)
	}
	if _, err := s.GetApproval(ctx, "apr_missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get unknown: %v, want ErrNotFound", err)
	}
	_, err = s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_missing", From: store.ApprovalPending, To: store.ApprovalApproved})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("transition unknown: %v, want ErrNotFound", err)
	}
}

// testApprovalOnePendingPerCall: of identical calls put at once, one is pending and every
// other is ErrConflict, and PendingApproval finds the one; once it is decided the call may be
// held again, and calls without a key, or of another org, are never refused for it.
func testApprovalOnePendingPerCall(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	const racers = 8
	var won atomic.Int32
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := newApproval(fmt.Sprintf("apr_race%d", i), "kb:page.read@1", "agent:bot", now)
			a.CallKey = "k1"
			switch err := s.PutApproval(ctx, a); {
			case err == nil:
				won.Add(1)
			case !errors.Is(err, store.ErrConflict):
				t.Errorf("put %s: %v, want nil or ErrConflict", a.ID, err)
			}
		}()
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d of %d identical calls were stored pending, want 1", won.Load(), racers)
	}
	pending, err := s.PendingApproval(ctx, "acme", "k1")
	if err != nil || pending.Status != store.ApprovalPending || len(pending.ID) < 8 || pending.ID[:8] != "apr_race" {
		t.Fatalf("PendingApproval(k1): %+v %v", pending, err)
	}
	if _, err := s.PendingApproval(ctx, "other", "k1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("PendingApproval of another org: %v, want ErrNotFound", err)
	}
	other := newApproval("apr_otherorg", "kb:page.read@1", "agent:bot", now)
	other.Org, other.CallKey = "other", "k1"
	unkeyed := newApproval("apr_unkeyed", "kb:page.read@1", "agent:bot", now)
	for _, a := range []store.Approval{other, unkeyed} {
		if err := s.PutApproval(ctx, a); err != nil {
			t.Fatalf("put %s: %v", a.ID, err)
		}
	}
	if _, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: pending.ID, From: store.ApprovalPending,
		To: store.ApprovalRejected, At: now}); err != nil {
		t.Fatal(err)
	}
	again := newApproval("apr_again", "kb:page.read@1", "agent:bot", now)
	again.CallKey = "k1"
	if err := s.PutApproval(ctx, again); err != nil {
		t.Fatalf("holding the call again once the first was decided: %v", err)
	}
	if got, err := s.PendingApproval(ctx, "acme", "k1"); err != nil || got.ID != again.ID {
		t.Fatalf("PendingApproval(k1) after the decision: %s %v, want %s", got.ID, err, again.ID)
	}
}

func testApprovalInvalid(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	base := newApproval("apr_x", "kb:page.read@1", "agent:bot", now)
	cases := map[string]func(a *store.Approval){
		"no id":           func(a *store.Approval) { a.ID = "" },
		"no requester":    func(a *store.Approval) { a.RequesterRef = "" },
		"not pending":     func(a *store.Approval) { a.Status = store.ApprovalApproved },
		"input not JSON":  func(a *store.Approval) { a.Input = json.RawMessage("{") },
		"already expired": func(a *store.Approval) { a.ExpiresAt = now.Add(-time.Second) },
	}
	for name, mutate := range cases {
		a := base
		mutate(&a)
		if err := s.PutApproval(ctx, a); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_x", From: "pending", To: "gone"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("unknown state: %v, want ErrInvalid", err)
	}
}

func testApprovalList(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	for i, spec := range []struct{ ref, requester string }{{"a:x.y@1", "agent:one"}, {"a:x.y@1", "agent:two"}, {"b:x.y@1", "agent:one"}} {
		if err := s.PutApproval(ctx, newApproval(fmt.Sprintf("apr_%d", i), spec.ref, spec.requester, now.Add(time.Duration(i)*time.Second))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_2", From: store.ApprovalPending,
		To: store.ApprovalRejected, DecidedBy: "user:ann", Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		f    store.ApprovalFilter
		want []string
	}{
		{store.ApprovalFilter{}, []string{"apr_2", "apr_1", "apr_0"}},
		{store.ApprovalFilter{Status: store.ApprovalPending}, []string{"apr_1", "apr_0"}},
		{store.ApprovalFilter{Ref: "a:x.y@1", RequesterRef: "agent:one"}, []string{"apr_0"}},
		{store.ApprovalFilter{Biome: "other"}, nil},
		{store.ApprovalFilter{Limit: 1}, []string{"apr_2"}},
	}
	for _, tc := range cases {
		got, err := s.ListApprovals(ctx, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, a := range got {
			ids = append(ids, a.ID)
		}
		if fmt.Sprint(ids) != fmt.Sprint(tc.want) {
			t.Errorf("filter %+v: got %v, want %v", tc.f, ids, tc.want)
		}
	}
}

func testApprovalTransitions(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.PutApproval(ctx, newApproval("apr_t", "kb:page.read@1", "agent:bot", time.Now())); err != nil {
		t.Fatal(err)
	}
	move := func(from, to string, tr store.ApprovalTransition) (store.Approval, error) {
		tr.ID, tr.From, tr.To, tr.At = "apr_t", from, to, time.Now()
		return s.TransitionApproval(ctx, tr)
	}
	if _, err := move(store.ApprovalPending, store.ApprovalApproved, store.ApprovalTransition{Live: true, DecidedBy: "user:ann"}); err != nil {
		t.Fatal(err)
	}
	got, err := move(store.ApprovalPending, store.ApprovalRejected, store.ApprovalTransition{DecidedBy: "user:bob", Reason: "late"})
	if !errors.Is(err, store.ErrConflict) || got.Status != store.ApprovalApproved || got.DecidedBy != "user:ann" {
		t.Fatalf("second decision: %v, %+v; want ErrConflict and the first decision kept", err, got)
	}
	if _, err := move(store.ApprovalApproved, store.ApprovalRunning, store.ApprovalTransition{}); err != nil {
		t.Fatal(err)
	}
	got, err = move(store.ApprovalRunning, store.ApprovalDone, store.ApprovalTransition{Outcome: "ok", Output: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != store.ApprovalDone || got.DecidedBy != "user:ann" || got.Outcome != "ok" || string(got.Output) != `{"n":1}` {
		t.Fatalf("after done: %+v", got)
	}
}

// testApprovalWithdrawnAndAnswer: a pending approval can be withdrawn (a terminal state no
// decision moves), and the answer of a run is kept as given, and kept by later moves.
func testApprovalWithdrawnAndAnswer(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	for _, id := range []string{"apr_w", "apr_r"} {
		if err := s.PutApproval(ctx, newApproval(id, "kb:page.read@1", "agent:bot", now)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_w", From: store.ApprovalPending, To: store.ApprovalWithdrawn,
		At: now, Live: true, DecidedBy: "agent:bot"})
	if err != nil || w.Status != store.ApprovalWithdrawn || w.DecidedBy != "agent:bot" || w.Answer != nil {
		t.Fatalf("withdraw: %v, %+v", err, w)
	}
	if _, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_w", From: store.ApprovalPending, To: store.ApprovalApproved,
		At: now, Live: true}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("approve a withdrawn approval: %v, want ErrConflict", err)
	}
	if got, err := s.ListApprovals(ctx, store.ApprovalFilter{Org: "acme", Status: store.ApprovalWithdrawn}); err != nil || len(got) != 1 || got[0].ID != "apr_w" {
		t.Fatalf("list withdrawn: %v, %+v", err, got)
	}
	answer := json.RawMessage(`{"status":200,"body":{"output":{"n":1},"auditId":"inv_1"}}`)
	for _, m := range []store.ApprovalTransition{{From: store.ApprovalPending, To: store.ApprovalRunning},
		{From: store.ApprovalRunning, To: store.ApprovalDone, Answer: answer}} {
		m.ID, m.At = "apr_r", now
		if _, err := s.TransitionApproval(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.GetApproval(ctx, "apr_r")
	if err != nil || string(got.Answer) != string(answer) {
		t.Fatalf("answer after done: %v, %s; want %s", err, got.Answer, answer)
	}
	if _, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_r", From: store.ApprovalRunning, To: store.ApprovalDone,
		At: now, Answer: json.RawMessage(`{"not":`)}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("an answer that is not JSON: %v, want ErrInvalid", err)
	}
}

func testApprovalExpiry(t *testing.T, s store.Store) {
	ctx := context.Background()
	created := time.Now().Add(-2 * time.Hour)
	if err := s.PutApproval(ctx, newApproval("apr_e", "kb:page.read@1", "agent:bot", created)); err != nil {
		t.Fatal(err)
	}
	_, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_e", From: store.ApprovalPending,
		To: store.ApprovalApproved, At: time.Now(), Live: true, DecidedBy: "user:ann"})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("approving an expired approval: %v, want ErrConflict", err)
	}
	got, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_e", From: store.ApprovalPending,
		To: store.ApprovalExpired, At: time.Now()})
	if err != nil || got.Status != store.ApprovalExpired || got.DecidedBy != "" {
		t.Fatalf("expire: %v, %+v", err, got)
	}
}

func testApprovalConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.PutApproval(ctx, newApproval("apr_c", "kb:page.read@1", "agent:bot", time.Now())); err != nil {
		t.Fatal(err)
	}
	var wins, conflicts atomic.Int32
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_c", From: store.ApprovalPending,
				To: store.ApprovalApproved, At: time.Now(), Live: true, DecidedBy: fmt.Sprintf("user:u%d", i)})
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, store.ErrConflict):
				conflicts.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 || conflicts.Load() != 19 {
		t.Fatalf("20 concurrent approvals: %d won, %d conflicted; want 1 and 19", wins.Load(), conflicts.Load())
	}
}

// addOne adds n to one counter, as a limiter with a single limit does.
func addOne(s Counter, key string, window, n, limit int64, exp time.Time) (int64, bool, error) {
	counts, refused, err := s.AddUsage(context.Background(), []store.UsageAdd{{Key: key, Window: window, N: n, Limit: limit, Expires: exp}})
	if err != nil || refused >= 0 {
		return 0, false, err
	}
	return counts[0], true, nil
}

func testUsageLimit(t *testing.T, s Counter) {
	ctx := context.Background()
	exp := time.Now().Add(time.Minute)
	for i := int64(1); i <= 3; i++ {
		n, ok, err := addOne(s, "k", 7, 1, 3, exp)
		if err != nil || !ok || n != i {
			t.Fatalf("add %d: count %d ok %v err %v", i, n, ok, err)
		}
	}
	if _, ok, err := addOne(s, "k", 7, 1, 3, exp); err != nil || ok {
		t.Fatalf("past the limit: ok %v err %v; want refused", ok, err)
	}
	if n, ok, err := addOne(s, "k", 7, 1, 4, exp); err != nil || !ok || n != 4 {
		t.Fatalf("under a higher limit after a refusal: count %d ok %v err %v; want 4 (the refusal added nothing)", n, ok, err)
	}
	if n, ok, err := addOne(s, "k", 8, 1, 3, exp); err != nil || !ok || n != 1 {
		t.Fatalf("next window: count %d ok %v err %v", n, ok, err)
	}
	if n, ok, err := addOne(s, "other", 7, 2, 3, exp); err != nil || !ok || n != 2 {
		t.Fatalf("other key: count %d ok %v err %v", n, ok, err)
	}
	if _, ok, err := addOne(s, "big", 7, 4, 3, exp); err != nil || ok {
		t.Fatalf("n above the limit: ok %v err %v; want refused", ok, err)
	}
	for _, bad := range []store.UsageAdd{{Key: "k", N: 0, Limit: 3}, {Key: "k", N: 1, Limit: 0}, {Key: "k", N: 1, Limit: -1}, {N: 1, Limit: 3}} {
		if _, _, err := s.AddUsage(ctx, []store.UsageAdd{{Key: "ok", N: 1, Limit: 9, Expires: exp}, bad}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
	if n, ok, err := addOne(s, "ok", 0, 1, 9, exp); err != nil || !ok || n != 1 {
		t.Fatalf("after invalid batches: count %d ok %v err %v; want 1 (nothing added)", n, ok, err)
	}
}

// testUsageAllOrNothing: a refused counter leaves every other counter of the call as it
// was, whatever order the adds come in, and the refusal names the first refused add.
func testUsageAllOrNothing(t *testing.T, s Counter) {
	ctx := context.Background()
	exp := time.Now().Add(time.Minute)
	rate := store.UsageAdd{Key: "rate", Window: 1, N: 1, Limit: 10, Expires: exp}
	quota := store.UsageAdd{Key: "quota", Window: 1, N: 1, Limit: 1, Expires: exp}
	counts, refused, err := s.AddUsage(ctx, []store.UsageAdd{rate, quota})
	if err != nil || refused != -1 || len(counts) != 2 || counts[0] != 1 || counts[1] != 1 {
		t.Fatalf("both within: counts %v refused %d err %v; want [1 1], none refused", counts, refused, err)
	}
	for range 3 {
		if counts, refused, err := s.AddUsage(ctx, []store.UsageAdd{rate, quota}); err != nil || refused != 1 || counts != nil {
			t.Fatalf("quota spent: counts %v refused %d err %v; want the quota (1) refused", counts, refused, err)
		}
	}
	if n, ok, err := addOne(s, "rate", 1, 1, 10, exp); err != nil || !ok || n != 2 {
		t.Fatalf("rate counter after three refused calls: %d ok %v err %v; want 2 (no token spent)", n, ok, err)
	}
	full := store.UsageAdd{Key: "rate", Window: 1, N: 1, Limit: 2, Expires: exp}
	if _, refused, err := s.AddUsage(ctx, []store.UsageAdd{full, quota}); err != nil || refused != 0 {
		t.Fatalf("both refuse: refused %d err %v; want the first (0)", refused, err)
	}
}

// testUsagePrune: expired counters go, in bounded batches; live ones stay and keep counting.
func testUsagePrune(t *testing.T, s Counter) {
	ctx := context.Background()
	now := time.Now()
	for i := range 5 {
		if _, ok, err := addOne(s, fmt.Sprintf("old-%d", i), 1, 1, 9, now.Add(-time.Duration(i+1)*time.Minute)); err != nil || !ok {
			t.Fatalf("expired counter %d: ok %v err %v", i, ok, err)
		}
	}
	for range 3 {
		if _, ok, err := addOne(s, "live", 2, 1, 3, now.Add(time.Minute)); err != nil || !ok {
			t.Fatalf("live counter: ok %v err %v", ok, err)
		}
	}
	if n, err := s.PruneUsage(ctx, now, 3); err != nil || n != 3 {
		t.Fatalf("first batch: %d pruned, err %v; want 3 (the limit)", n, err)
	}
	if n, err := s.PruneUsage(ctx, now, 3); err != nil || n != 2 {
		t.Fatalf("second batch: %d pruned, err %v; want the 2 left", n, err)
	}
	if n, err := s.PruneUsage(ctx, now, 3); err != nil || n != 0 {
		t.Fatalf("nothing left: %d pruned, err %v", n, err)
	}
	if _, ok, err := addOne(s, "live", 2, 1, 3, now.Add(time.Minute)); err != nil || ok {
		t.Fatalf("live counter after pruning: ok %v err %v; want still full (3 of 3)", ok, err)
	}
	if n, ok, err := addOne(s, "old-0", 1, 1, 9, now.Add(-time.Minute)); err != nil || !ok || n != 1 {
		t.Fatalf("pruned counter counted again: %d ok %v err %v; want a fresh row (1)", n, ok, err)
	}
	if _, err := s.PruneUsage(ctx, now, 0); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("limit 0: %v, want ErrInvalid", err)
	}
}

func testUsageConcurrent(t *testing.T, s Counter) {
	const limit, callers = 25, 60
	var passed atomic.Int32
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, ok, err := addOne(s, "race", 1, 1, limit, time.Now().Add(time.Minute))
			if err != nil {
				t.Error(err)
			}
			if ok {
				passed.Add(1)
			}
		}()
	}
	wg.Wait()
	if passed.Load() != limit {
		t.Fatalf("%d concurrent adds under limit %d: %d passed", callers, limit, passed.Load())
	}
}

// testUsageSaveLoad: saved counters load back while their window lives, a stored counter
// keeps the larger count, AddUsage counts on from a saved value, invalid counts are refused.
func testUsageSaveLoad(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	live := store.UsageCount{Key: "live", Window: 3, Count: 5, Expires: now.Add(time.Minute)}
	ended := store.UsageCount{Key: "ended", Window: 1, Count: 2, Expires: now.Add(-time.Minute)}
	if err := s.SaveUsage(ctx, []store.UsageCount{live, ended}); err != nil {
		t.Fatal(err)
	}
	smaller := live
	smaller.Count = 4
	if err := s.SaveUsage(ctx, []store.UsageCount{smaller}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.LoadUsage(ctx, now); err != nil || len(got) != 1 || got[0] != live {
		t.Fatalf("LoadUsage = %+v, %v; want only %+v (the larger count kept)", got, err, live)
	}
	if n, ok, err := addOne(s, "live", 3, 1, 6, live.Expires); err != nil || !ok || n != 6 {
		t.Fatalf("add after save: count %d ok %v err %v; want 6", n, ok, err)
	}
	many := make([]store.UsageCount, 600) // more than one statement carries
	for i := range many {
		many[i] = store.UsageCount{Key: fmt.Sprintf("k%d", i), Window: 1, Count: int64(i), Expires: now.Add(time.Hour)}
	}
	if err := s.SaveUsage(ctx, many); err != nil {
		t.Fatal(err)
	}
	if got, err := s.LoadUsage(ctx, now); err != nil || len(got) != len(many)+1 {
		t.Fatalf("LoadUsage after %d more: %d counters, %v", len(many), len(got), err)
	}
	for _, bad := range []store.UsageCount{{Window: 1, Count: 1}, {Key: "neg", Count: -1}} {
		if err := s.SaveUsage(ctx, []store.UsageCount{bad}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("SaveUsage(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}

// testUsageWithAuditBatch: the records and the counters commit together, or neither does.
func testUsageWithAuditBatch(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	c := store.UsageCount{Key: "rate", Window: 1, Count: 3, Expires: now.Add(time.Minute)}
	batch := auditBatch("u", 2)
	if err := s.AppendAuditsWithUsage(ctx, batch, []store.UsageCount{c}); err != nil {
		t.Fatal(err)
	}
	wantAudits(t, s, batch)
	if got, err := s.LoadUsage(ctx, now); err != nil || len(got) != 1 || got[0] != c {
		t.Fatalf("LoadUsage = %+v, %v; want %+v", got, err, c)
	}
	// A stored id refuses the batch: its counters are not written either.
	later := c
	later.Count = 9
	if err := s.AppendAuditsWithUsage(ctx, batch[:1], []store.UsageCount{later}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a batch with a stored id = %v, want ErrConflict", err)
	}
	if got, err := s.LoadUsage(ctx, now); err != nil || len(got) != 1 || got[0] != c {
		t.Fatalf("after the refused batch: %+v, %v; want %+v unchanged", got, err, c)
	}
	if err := s.AppendAuditsWithUsage(ctx, nil, []store.UsageCount{later}); err != nil {
		t.Fatalf("counters alone: %v", err)
	}
	if got, err := s.LoadUsage(ctx, now); err != nil || len(got) != 1 || got[0] != later {
		t.Fatalf("after counters alone: %+v, %v; want %+v", got, err, later)
	}
}

// testCountPendingApprovals: only the requester's pending approvals of the org count, at most
// limit of them; a bad argument is refused.
func testCountPendingApprovals(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	for i, a := range []store.Approval{newApproval("apr_c1", "kb:page.read@1", "agent:bot", now),
		newApproval("apr_c2", "kb:page.read@1", "agent:bot", now), newApproval("apr_c3", "kb:page.read@1", "agent:bot", now),
		newApproval("apr_other", "kb:page.read@1", "agent:other", now)} {
		if i == 2 {
			a.Org = "globex"
		}
		if err := s.PutApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_c2", From: store.ApprovalPending, To: store.ApprovalRejected, At: now}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutApproval(ctx, newApproval("apr_c4", "kb:page.read@1", "agent:bot", now)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ limit, want int }{{10, 2}, {2, 2}, {1, 1}} {
		if n, err := s.CountPendingApprovals(ctx, "acme", "agent:bot", tc.limit); err != nil || n != tc.want {
			t.Fatalf("count with limit %d: %d %v; want %d", tc.limit, n, err, tc.want)
		}
	}
	for _, bad := range []struct {
		org, requester string
		limit          int
	}{{"", "agent:bot", 1}, {"acme", "", 1}, {"acme", "agent:bot", 0}} {
		if _, err := s.CountPendingApprovals(ctx, bad.org, bad.requester, bad.limit); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("count %+v: %v; want ErrInvalid", bad, err)
		}
	}
}
