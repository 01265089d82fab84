package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// runApprovalNotify is the conformance of what approvers are shown and told: keyset pages
// of the held calls (ties in created_at included), the expiry sweep's filter, the fields an
// approver judges by, and the approval_events outbox (queued with the step it tells, only
// if the step wins; claimed by one replica at a time; retried; pruned).
func runApprovalNotify(t *testing.T, open func(t *testing.T) store.Store) {
	runSubtests(t, open, []subtest{
		{"ApprovalPages", testApprovalPages},
		{"ApprovalExpiredBy", testApprovalExpiredBy},
		{"ApprovalJudgedFields", testApprovalJudgedFields},
		{"ApprovalEventsWithTheirStep", testApprovalEventsWithStep},
		{"ApprovalEventsClaimRetryPrune", testApprovalEventsClaim},
	})
}

func testApprovalPages(t *testing.T, s store.Store) {
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Second)
	var want []string
	for i := range 23 {
		// Three calls share each second: the id breaks the tie.
		a := newApproval(fmt.Sprintf("apr_%02d", i), "kb:page.read@1", "agent:bot", base.Add(time.Duration(i/3)*time.Second))
		if err := s.PutApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
		want = append(want, a.ID)
	}
	other := newApproval("apr_zz", "kb:page.read@1", "agent:bot", base)
	other.Org = "globex"
	if err := s.PutApproval(ctx, other); err != nil {
		t.Fatal(err)
	}
	slices.Reverse(want)
	var got []string
	var after *store.ApprovalKey
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatalf("paging does not end: %v", got)
		}
		page, err := s.ListApprovals(ctx, store.ApprovalFilter{Org: "acme", Limit: 5, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range page {
			got = append(got, a.ID)
		}
		if len(page) < 5 {
			break
		}
		last := page[len(page)-1]
		after = &store.ApprovalKey{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages of 5: %v\nwant newest first, each once: %v", got, want)
	}
}

func testApprovalExpiredBy(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	for i, created := range []time.Time{now.Add(-3 * time.Hour), now.Add(-2 * time.Hour), now} {
		if err := s.PutApproval(ctx, newApproval(fmt.Sprintf("apr_%d", i), "kb:page.read@1", "agent:bot", created)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_1", From: store.ApprovalPending,
		To: store.ApprovalRejected, At: now, DecidedBy: "user:ann", Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListApprovals(ctx, store.ApprovalFilter{ExpiredBy: now})
	if err != nil || len(got) != 1 || got[0].ID != "apr_0" {
		t.Fatalf("pending past expiry: %v %v; want apr_0 only (apr_1 is rejected, apr_2 not expired)", got, err)
	}
}

func testApprovalJudgedFields(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := newApproval("apr_j", "kb:page.read@1", "agent:bot", time.Now())
	a.BiomeVersion, a.PolicyRevision, a.RiskTier = "1.2.0", "rev-42", "high"
	if err := s.PutApproval(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetApproval(ctx, a.ID)
	if err != nil || got.BiomeVersion != "1.2.0" || got.PolicyRevision != "rev-42" || got.RiskTier != "high" {
		t.Fatalf("judged fields: %+v %v", got, err)
	}
}

func newEvent(id, approvalID, kind string) store.ApprovalEvent {
	return store.ApprovalEvent{ID: id, Org: "acme", ApprovalID: approvalID, Kind: kind, Target: "webhook:abc",
		Body: json.RawMessage(`{"event":"` + kind + `","approvalId":"` + approvalID + `"}`)}
}

func claimIDs(t *testing.T, s store.Store, holder string, now time.Time) []string {
	t.Helper()
	evs, err := s.ClaimApprovalEvents(context.Background(), holder, now, now.Add(time.Minute), 10)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	slices.Sort(ids)
	return ids
}

func testApprovalEventsWithStep(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	if err := s.PutApproval(ctx, newApproval("apr_e", "kb:page.read@1", "agent:bot", now), newEvent("evt_held", "apr_e", "held")); err != nil {
		t.Fatal(err)
	}
	// A bad event refuses the whole step: the approval is not stored without it.
	bad := newEvent("evt_bad", "apr_f", "held")
	bad.Body = json.RawMessage("{")
	wantErr(t, "put with an invalid event", s.PutApproval(ctx, newApproval("apr_f", "kb:page.read@1", "agent:bot", now), bad), store.ErrInvalid)
	_, err := s.GetApproval(ctx, "apr_f")
	wantErr(t, "the approval of the refused put", err, store.ErrNotFound)

	win := store.ApprovalTransition{ID: "apr_e", From: store.ApprovalPending, To: store.ApprovalRejected, At: now,
		DecidedBy: "user:ann", Reason: "no", Events: []store.ApprovalEvent{newEvent("evt_decided", "apr_e", "decided")}}
	if _, err := s.TransitionApproval(ctx, win); err != nil {
		t.Fatal(err)
	}
	lose := win
	lose.To, lose.Events = store.ApprovalApproved, []store.ApprovalEvent{newEvent("evt_lost", "apr_e", "decided")}
	_, err = s.TransitionApproval(ctx, lose)
	wantErr(t, "a move that lost", err, store.ErrConflict)
	if got := claimIDs(t, s, "r1", now.Add(time.Second)); !slices.Equal(got, []string{"evt_decided", "evt_held"}) {
		t.Fatalf("queued events: %v; want the put's and the winning move's, not the losing move's", got)
	}
}

func testApprovalEventsClaim(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	if err := s.PutApproval(ctx, newApproval("apr_c", "kb:page.read@1", "agent:bot", now),
		newEvent("evt_1", "apr_c", "held"), newEvent("evt_2", "apr_c", "held")); err != nil {
		t.Fatal(err)
	}
	at := now.Add(time.Second)
	if got := claimIDs(t, s, "r1", at); len(got) != 2 {
		t.Fatalf("r1 claims %v; want both", got)
	}
	if got := claimIDs(t, s, "r2", at); len(got) != 0 {
		t.Fatalf("r2 claims %v while r1 holds them; want none", got)
	}
	wantErr(t, "end under another's claim", s.EndApprovalEvent(ctx, store.ApprovalEventEnd{ID: "evt_1", Holder: "r2", At: at,
		Status: store.EventDelivered}), store.ErrConflict)
	wantErr(t, "end an unknown event", s.EndApprovalEvent(ctx, store.ApprovalEventEnd{ID: "evt_none", Holder: "r1", At: at,
		Status: store.EventDelivered}), store.ErrNotFound)
	wantErr(t, "end with an unknown status", s.EndApprovalEvent(ctx, store.ApprovalEventEnd{ID: "evt_1", Holder: "r1", At: at,
		Status: "lost"}), store.ErrInvalid)
	if err := s.EndApprovalEvent(ctx, store.ApprovalEventEnd{ID: "evt_1", Holder: "r1", At: at, Status: store.EventDelivered}); err != nil {
		t.Fatal(err)
	}
	if err := s.EndApprovalEvent(ctx, store.ApprovalEventEnd{ID: "evt_2", Holder: "r1", At: at, Status: store.EventPending,
		NextAt: at.Add(time.Minute), LastError: "answered 500"}); err != nil {
		t.Fatal(err)
	}
	// The holder's own claim is its to take back at once (a restarted replica).
	if err := s.PutApproval(ctx, newApproval("apr_d", "kb:page.read@1", "agent:bot", now), newEvent("evt_3", "apr_d", "held")); err != nil {
		t.Fatal(err)
	}
	if got := claimIDs(t, s, "r1", at); !slices.Equal(got, []string{"evt_3"}) {
		t.Fatalf("claim before the retry is due: %v; want only the new evt_3", got)
	}
	if got := claimIDs(t, s, "r1", at.Add(time.Second)); !slices.Equal(got, []string{"evt_3"}) {
		t.Fatalf("r1 claims again its own, under a new lease: %v; want evt_3", got)
	}
	if got := claimIDs(t, s, "r2", at.Add(time.Second)); len(got) != 0 {
		t.Fatalf("r2 claims %v under r1's new lease; want none", got)
	}
	evs, err := s.ClaimApprovalEvents(ctx, "r2", at.Add(2*time.Minute), at.Add(3*time.Minute), 10)
	if err != nil {
		t.Fatal(err)
	}
	var retried *store.ApprovalEvent
	for i := range evs {
		if evs[i].ID == "evt_2" {
			retried = &evs[i]
		}
	}
	if len(evs) != 2 || retried == nil || retried.Attempts != 1 || retried.LastError != "answered 500" {
		t.Fatalf("claims once due and r1's lease ended: %+v; want evt_2 (1 attempt, its error) and evt_3", evs)
	}
	if err := s.EndApprovalEvent(ctx, store.ApprovalEventEnd{ID: "evt_2", Holder: "r2", At: at, Status: store.EventFailed,
		LastError: "gave up"}); err != nil {
		t.Fatal(err)
	}
	n, err := s.PruneApprovalEvents(ctx, at.Add(time.Second), 10)
	if err != nil || n != 2 {
		t.Fatalf("prune: %d %v; want the delivered and the failed event", n, err)
	}
	if got := claimIDs(t, s, "r2", at.Add(4*time.Minute)); !slices.Equal(got, []string{"evt_3"}) {
		t.Fatalf("after the prune: %v; want the pending evt_3 kept", got)
	}
	if _, err := s.ClaimApprovalEvents(ctx, "", at, at, 10); err == nil {
		t.Fatal("a claim without holder was accepted")
	}
}
