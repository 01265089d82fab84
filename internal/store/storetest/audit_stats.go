package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// testAuditStats: the counts of one org's range only, calls told from outcome and approval
// records, buckets counted from since, reasons once per record, runners' errors and
// latencies, the revisions seen, and a malformed query refused.
func testAuditStats(t *testing.T, s store.Store) {
	ctx := context.Background()
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	add := func(r store.AuditRecord) {
		if r.Reasons == nil {
			r.Reasons = json.RawMessage(`[]`)
		}
		if err := s.AppendAudit(ctx, r); err != nil {
			t.Fatalf("AppendAudit(%s): %v", r.ID, err)
		}
	}
	call := func(id, org string, sec int, ref, decision, rev string) store.AuditRecord {
		return store.AuditRecord{ID: id, Org: org, Time: at(sec), Ref: ref, SubjectKind: "agent", SubjectRef: "agent:bot",
			Decision: decision, BundleRevision: rev}
	}
	add(call("c1", "acme", 0, "kb:page.read@1", "allowed", "r1"))
	out := call("c1.outcome", "acme", 1, "kb:page.read@1", "allowed", "r1")
	out.Runner, out.Outcome, out.LatencyMicros, out.ParentID = "http", "ok", 3000, "c1"
	add(out)
	add(call("c2", "acme", 5, "kb:page.read@1", "allowed", "r1"))
	out2 := call("c2.outcome", "acme", 6, "kb:page.read@1", "allowed", "r1")
	out2.Runner, out2.Outcome, out2.LatencyMicros, out2.ParentID = "http", "PROVIDER_ERROR", 9000, "c2"
	add(out2)
	d1 := call("c3", "acme", 61, "kb:page.write@1", "denied", "r2")
	d1.Reasons = json.RawMessage(`[{"code":"MISSING_GRANT"},{"code":"MISSING_GRANT"},{"code":"NOT_SAFE_FOR_AGENTS"}]`)
	add(d1)
	d2 := call("c4", "acme", 62, "kb:page.write@1", "denied", "r2")
	d2.Reasons = json.RawMessage(`[{"code":"MISSING_GRANT"}]`)
	add(d2)
	add(call("c5", "acme", 63, "kb:page.write@1", "pending-approval", "r2"))
	apr := call("c6", "acme", 64, "kb:page.write@1", "approved", "r2")
	apr.Runner, apr.Outcome, apr.ParentID = "approval", "approved", "c5"
	add(apr)
	add(call("c7", "acme", 65, "nope:x.y@1", "unknown-capability", "r2"))
	add(call("c8", "acme", 120, "kb:page.read@1", "allowed", "r2")) // at until: outside
	add(call("g1", "globex", 10, "kb:page.read@1", "denied", "r1"))
	odd := call("c9", "acme", 66, "kb:page.write@1", "denied", "r2")
	odd.Reasons = json.RawMessage(`{"code":"MISSING_GRANT"}`) // not an array: no reason, no error
	add(odd)

	calls := []string{"allowed", "denied", "pending-approval", "invalid-input", "unknown-capability", "error"}
	got, err := s.AuditStats(ctx, store.AuditStatsQuery{Org: "acme", Since: at(0), Until: at(120), Bucket: time.Minute, Top: 10, Calls: calls})
	if err != nil {
		t.Fatalf("AuditStats: %v", err)
	}
	equal(t, "series", got.Series, []store.BucketCount{
		{Bucket: 0, Decision: "allowed", Count: 2},
		{Bucket: 1, Decision: "denied", Count: 3}, {Bucket: 1, Decision: "pending-approval", Count: 1},
		{Bucket: 1, Decision: "unknown-capability", Count: 1},
	})
	equal(t, "refs", got.Refs, []store.KeyCount{{Key: "kb:page.write@1", Count: 4}, {Key: "kb:page.read@1", Count: 2}, {Key: "nope:x.y@1", Count: 1}})
	equal(t, "reasons", got.Reasons, []store.KeyCount{{Key: "MISSING_GRANT", Count: 2}, {Key: "NOT_SAFE_FOR_AGENTS", Count: 1}})
	equal(t, "runners", got.Runners, []store.RunnerCount{{Runner: "http", Runs: 2, Errors: 1, LatencySumMicros: 12000, LatencyMaxMicros: 9000}})
	equal(t, "revisions", got.Revisions, []store.RevisionSpan{{Revision: "r1", First: at(0), Last: at(6)}, {Revision: "r2", First: at(61), Last: at(66)}})

	top, err := s.AuditStats(ctx, store.AuditStatsQuery{Org: "acme", Since: at(0), Until: at(121), Bucket: time.Minute, Top: 1, Calls: calls})
	if err != nil {
		t.Fatalf("AuditStats top 1: %v", err)
	}
	equal(t, "top ref", top.Refs, []store.KeyCount{{Key: "kb:page.write@1", Count: 4}})
	equal(t, "the bucket at until", top.Series[len(top.Series)-1], store.BucketCount{Bucket: 2, Decision: "allowed", Count: 1})

	// A person's allowed read counts unless omitted, as ListAudit's Omit leaves it out.
	person := call("c10", "acme", 70, "kb:page.read@1", "allowed", "r2")
	person.SubjectKind = "user"
	add(person)
	omitted, err := s.AuditStats(ctx, store.AuditStatsQuery{Org: "acme", Since: at(0), Until: at(120), Bucket: time.Minute, Top: 10, Calls: calls,
		Omit: &store.AuditOmit{SubjectKind: "user", Refs: []string{"kb:page.read@1"}}})
	if err != nil {
		t.Fatalf("AuditStats with Omit: %v", err)
	}
	equal(t, "omitted", omitted, got)
	counted, err := s.AuditStats(ctx, store.AuditStatsQuery{Org: "acme", Since: at(0), Until: at(120), Bucket: time.Minute, Top: 2, Calls: calls})
	if err != nil {
		t.Fatalf("AuditStats: %v", err)
	}
	equal(t, "refs with the person's read", counted.Refs, []store.KeyCount{{Key: "kb:page.write@1", Count: 4}, {Key: "kb:page.read@1", Count: 3}})

	none, err := s.AuditStats(ctx, store.AuditStatsQuery{Org: "initech", Since: at(0), Until: at(120), Bucket: time.Minute, Top: 10, Calls: calls})
	if err != nil || len(none.Series)+len(none.Refs)+len(none.Reasons)+len(none.Runners)+len(none.Revisions) != 0 {
		t.Fatalf("AuditStats of an org without records = %+v, %v; want nothing", none, err)
	}
	for _, bad := range []store.AuditStatsQuery{
		{Org: "acme", Since: at(0), Until: at(120), Top: 10, Calls: calls},
		{Org: "acme", Since: at(120), Until: at(0), Bucket: time.Minute, Top: 10, Calls: calls},
		{Org: "acme", Since: at(0), Until: at(120), Bucket: time.Minute, Calls: calls},
		{Org: "acme", Since: at(0), Until: at(120), Bucket: time.Minute, Top: 10},
	} {
		if _, err := s.AuditStats(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("AuditStats(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}

// testApprovalsWaiting: one org's pending, unexpired approvals and the oldest's creation.
func testApprovalsWaiting(t *testing.T, s store.Store) {
	ctx := context.Background()
	n, oldest, err := s.ApprovalsWaiting(ctx, "acme", t0)
	if err != nil || n != 0 || !oldest.IsZero() {
		t.Fatalf("ApprovalsWaiting of none = %d, %v, %v", n, oldest, err)
	}
	put := func(a store.Approval) {
		if err := s.PutApproval(ctx, a); err != nil {
			t.Fatalf("PutApproval(%s): %v", a.ID, err)
		}
	}
	a1 := newApproval("apr_1", "kb:page.write@1", "agent:bot", t0.Add(-time.Hour))
	a1.ExpiresAt = t0.Add(time.Hour)
	a2 := newApproval("apr_2", "kb:page.write@1", "agent:bot", t0.Add(-2*time.Hour))
	a2.ExpiresAt = t0 // expired at now: no longer waiting
	a3 := newApproval("apr_3", "kb:page.write@1", "agent:bot", t0.Add(-30*time.Minute))
	a4 := newApproval("apr_4", "kb:page.write@1", "agent:bot", t0.Add(-3*time.Hour))
	a4.Org = "globex"
	for _, a := range []store.Approval{a1, a2, a3, a4} {
		put(a)
	}
	if _, err := s.TransitionApproval(ctx, store.ApprovalTransition{ID: "apr_3", From: store.ApprovalPending, To: store.ApprovalRejected, At: t0}); err != nil {
		t.Fatalf("reject apr_3: %v", err)
	}
	n, oldest, err = s.ApprovalsWaiting(ctx, "acme", t0)
	if err != nil || n != 1 || !oldest.Equal(a1.CreatedAt) {
		t.Fatalf("ApprovalsWaiting = %d, %v, %v; want 1, %v", n, oldest, err, a1.CreatedAt)
	}
}
