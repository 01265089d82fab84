package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// statsBase is the start of the stats tests' range: a whole hour, as AuditStats counts in
// whole buckets.
var statsBase = t0.Truncate(time.Hour)

// statsCalls are the call decisions the stats tests count.
var statsCalls = []string{"allowed", "denied", "pending-approval", "invalid-input", "unknown-capability", "error"}

// statsLog is the stats tests' log: records written unchained (AppendAudit, read by
// AuditStats from the log) or chained (AppendAudits, folded into the rollups).
type statsLog struct {
	t       *testing.T
	s       store.Store
	chained bool
	seq     int64
}

func (l *statsLog) at(sec int) time.Time { return statsBase.Add(time.Duration(sec) * time.Second) }

func (l *statsLog) add(r store.AuditRecord) {
	l.t.Helper()
	if r.Reasons == nil {
		r.Reasons = json.RawMessage(`[]`)
	}
	ctx := context.Background()
	if !l.chained {
		if err := l.s.AppendAudit(ctx, r); err != nil {
			l.t.Fatalf("AppendAudit(%s): %v", r.ID, err)
		}
		return
	}
	l.seq++
	r.Chain = store.ChainLink{ChainID: "ch_stats", Seq: l.seq, Hash: fmt.Sprintf("h%d", l.seq)}
	if err := l.s.AppendAudits(ctx, []store.AuditRecord{r}); err != nil {
		l.t.Fatalf("AppendAudits(%s): %v", r.ID, err)
	}
}

func (l *statsLog) call(id, org string, sec int, ref, decision, rev string) store.AuditRecord {
	return store.AuditRecord{ID: id, Org: org, Time: l.at(sec), Ref: ref, SubjectKind: "agent", SubjectRef: "agent:bot",
		Decision: decision, BundleRevision: rev}
}

// stats is AuditStats of org over [since, until) seconds by minute, failing the test on an error.
func (l *statsLog) stats(org string, since, until, top int, o *store.AuditOmit) store.AuditStats {
	l.t.Helper()
	got, err := l.s.AuditStats(context.Background(), store.AuditStatsQuery{Org: org, Since: l.at(since), Until: l.at(until),
		Bucket: time.Minute, Top: top, Calls: statsCalls, Omit: o})
	if err != nil {
		l.t.Fatalf("AuditStats(%s, %d..%d): %v", org, since, until, err)
	}
	return got
}

// advance runs the rollup pass at now until it has nothing left.
func (l *statsLog) advance(now time.Time) store.RollupProgress {
	l.t.Helper()
	var total store.RollupProgress
	for {
		p, err := l.s.AdvanceAuditRollups(context.Background(), now, 4)
		if err != nil {
			l.t.Fatalf("AdvanceAuditRollups: %v", err)
		}
		total.Folded += p.Folded
		total.Recounted += p.Recounted
		if p.Left == 0 && p.Recounted == 0 {
			return total
		}
	}
}

// testAuditStats: the counts of one org's range only, calls told from outcome and approval
// records, buckets counted from since, reasons once per record, runners' errors and
// latencies, the revisions seen, and a malformed query refused: the same answers from
// unchained records (read from the log), from chained ones not folded yet (read past the
// watermark) and from the rollups once folded.
func testAuditStats(t *testing.T, s store.Store) {
	unchained := &statsLog{t: t, s: s}
	auditStatsCase(unchained, "u")
	want := auditStatsAnswers(unchained, "u")
	// The chained case writes to orgs of its own, so the unchained records stay out of it.
	chained := &statsLog{t: t, s: s, chained: true}
	auditStatsCase(chained, "c")
	equal(t, "chained, not folded, vs unchained", auditStatsAnswers(chained, "c"), want)
	chained.advance(chained.at(200))
	equal(t, "folded vs unchained", auditStatsAnswers(chained, "c"), want)
}

// statsAnswers are a case's queries' answers, to compare across the ways records are read.
type statsAnswers struct {
	All, Top1, Omitted, Counted store.AuditStats
}

// auditStatsCase writes the case's records (ids and orgs prefixed by p) and checks the answers.
func auditStatsCase(l *statsLog, p string) {
	t := l.t
	acme, globex := p+"acme", p+"globex"
	add, call := l.add, l.call
	add(call(p+"c1", acme, 0, "kb:page.read@1", "allowed", "r1"))
	out := call(p+"c1.outcome", acme, 1, "kb:page.read@1", "allowed", "r1")
	out.Runner, out.Outcome, out.LatencyMicros, out.ParentID = "http", "ok", 3000, p+"c1"
	add(out)
	add(call(p+"c2", acme, 5, "kb:page.read@1", "allowed", "r1"))
	out2 := call(p+"c2.outcome", acme, 6, "kb:page.read@1", "allowed", "r1")
	out2.Runner, out2.Outcome, out2.LatencyMicros, out2.ParentID = "http", "PROVIDER_ERROR", 9000, p+"c2"
	add(out2)
	d1 := call(p+"c3", acme, 61, "kb:page.write@1", "denied", "r2")
	d1.Reasons = json.RawMessage(`[{"code":"MISSING_GRANT"},{"code":"MISSING_GRANT"},{"code":"NOT_SAFE_FOR_AGENTS"}]`)
	add(d1)
	d2 := call(p+"c4", acme, 62, "kb:page.write@1", "denied", "r2")
	d2.Reasons = json.RawMessage(`[{"code":"MISSING_GRANT"}]`)
	add(d2)
	add(call(p+"c5", acme, 63, "kb:page.write@1", "pending-approval", "r2"))
	apr := call(p+"c6", acme, 64, "kb:page.write@1", "approved", "r2")
	apr.Runner, apr.Outcome, apr.ParentID = "approval", "approved", p+"c5"
	add(apr)
	add(call(p+"c7", acme, 65, "nope:x.y@1", "unknown-capability", "r2"))
	add(call(p+"c8", acme, 120, "kb:page.read@1", "allowed", "r2")) // at until: outside
	add(call(p+"g1", globex, 10, "kb:page.read@1", "denied", "r1"))
	odd := call(p+"c9", acme, 66, "kb:page.write@1", "denied", "r2")
	odd.Reasons = json.RawMessage(`{"code":"MISSING_GRANT"}`) // not an array: no reason, no error
	add(odd)

	got := l.stats(acme, 0, 120, 10, nil)
	equal(t, "series", got.Series, []store.BucketCount{
		{Bucket: 0, Decision: "allowed", Count: 2},
		{Bucket: 1, Decision: "denied", Count: 3}, {Bucket: 1, Decision: "pending-approval", Count: 1},
		{Bucket: 1, Decision: "unknown-capability", Count: 1},
	})
	equal(t, "refs", got.Refs, []store.KeyCount{{Key: "kb:page.write@1", Count: 4}, {Key: "kb:page.read@1", Count: 2}, {Key: "nope:x.y@1", Count: 1}})
	equal(t, "reasons", got.Reasons, []store.KeyCount{{Key: "MISSING_GRANT", Count: 2}, {Key: "NOT_SAFE_FOR_AGENTS", Count: 1}})
	equal(t, "runners", got.Runners, []store.RunnerCount{{Runner: "http", Runs: 2, Errors: 1, LatencySumMicros: 12000, LatencyMaxMicros: 9000}})
	equal(t, "revisions", got.Revisions, []store.RevisionSpan{{Revision: "r1", First: l.at(0), Last: l.at(6)}, {Revision: "r2", First: l.at(61), Last: l.at(66)}})

	top := l.stats(acme, 0, 180, 1, nil)
	equal(t, "top ref", top.Refs, []store.KeyCount{{Key: "kb:page.write@1", Count: 4}})
	equal(t, "the bucket at until", top.Series[len(top.Series)-1], store.BucketCount{Bucket: 2, Decision: "allowed", Count: 1})

	// A person's allowed read counts unless omitted, as ListAudit's Omit leaves it out.
	person := call(p+"c10", acme, 70, "kb:page.read@1", "allowed", "r2")
	person.SubjectKind = "user"
	add(person)
	equal(t, "omitted", l.stats(acme, 0, 120, 10, &store.AuditOmit{SubjectKind: "user", Refs: []string{"kb:page.read@1"}}), got)
	equal(t, "refs with the person's read", l.stats(acme, 0, 120, 2, nil).Refs, []store.KeyCount{{Key: "kb:page.write@1", Count: 4}, {Key: "kb:page.read@1", Count: 3}})

	none := l.stats(p+"initech", 0, 120, 10, nil)
	if len(none.Series)+len(none.Refs)+len(none.Reasons)+len(none.Runners)+len(none.Revisions) != 0 {
		t.Fatalf("AuditStats of an org without records = %+v; want nothing", none)
	}
	for _, bad := range []store.AuditStatsQuery{
		{Org: acme, Since: l.at(0), Until: l.at(120), Top: 10, Calls: statsCalls},
		{Org: acme, Since: l.at(0), Until: l.at(120), Bucket: 2 * time.Minute, Top: 10, Calls: statsCalls},
		{Org: acme, Since: l.at(1), Until: l.at(120), Bucket: time.Minute, Top: 10, Calls: statsCalls},
		{Org: acme, Since: l.at(0), Until: l.at(121), Bucket: time.Minute, Top: 10, Calls: statsCalls},
		{Org: acme, Since: l.at(120), Until: l.at(0), Bucket: time.Minute, Top: 10, Calls: statsCalls},
		{Org: acme, Since: l.at(0), Until: l.at(120), Bucket: time.Minute, Calls: statsCalls},
		{Org: acme, Since: l.at(0), Until: l.at(120), Bucket: time.Minute, Top: 10},
	} {
		if _, err := l.s.AuditStats(context.Background(), bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("AuditStats(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}

// auditStatsAnswers asks a written case's queries again.
func auditStatsAnswers(l *statsLog, p string) statsAnswers {
	acme := p + "acme"
	return statsAnswers{All: l.stats(acme, 0, 120, 10, nil), Top1: l.stats(acme, 0, 180, 1, nil),
		Omitted: l.stats(acme, 0, 120, 10, &store.AuditOmit{SubjectKind: "user", Refs: []string{"kb:page.read@1"}}),
		Counted: l.stats(acme, 0, 120, 2, nil)}
}

// testAuditRollups: a record arriving late reopens its bucket, another org's records never
// count, a prune's deletions are out of the answers at once (the stale buckets counted
// again from the records left) and after the next pass, old buckets are dropped, and the
// records past the watermark beyond the tail read are answered as uncounted.
func testAuditRollups(t *testing.T, s store.Store) {
	ctx := context.Background()
	l := &statsLog{t: t, s: s, chained: true}
	for i := range 10 {
		r := l.call(fmt.Sprintf("r%d", i), "acme", i*10, "kb:page.read@1", "allowed", "r1")
		if i >= 6 {
			r.Decision, r.Reasons = "denied", json.RawMessage(`[{"code":"MISSING_GRANT"}]`)
		}
		l.add(r)
	}
	l.add(l.call("g1", "globex", 5, "kb:page.read@1", "denied", "r1"))
	now := l.at(300)
	if p := l.advance(now); p.Folded != 11 {
		t.Fatalf("first pass folded %d records, want 11", p.Folded)
	}
	series := func(st store.AuditStats) []store.BucketCount { return st.Series }
	equal(t, "folded", series(l.stats("acme", 0, 180, 10, nil)), []store.BucketCount{
		{Bucket: 0, Decision: "allowed", Count: 6}, {Bucket: 1, Decision: "denied", Count: 4}})

	// Late: stamped in the first minute, appended after the pass.
	l.add(l.call("late", "acme", 30, "kb:page.write@1", "denied", "r1"))
	want := []store.BucketCount{{Bucket: 0, Decision: "allowed", Count: 6}, {Bucket: 0, Decision: "denied", Count: 1},
		{Bucket: 1, Decision: "denied", Count: 4}}
	equal(t, "late, before the pass", series(l.stats("acme", 0, 180, 10, nil)), want)
	l.advance(now)
	equal(t, "late, folded", series(l.stats("acme", 0, 180, 10, nil)), want)
	if g := l.stats("globex", 0, 180, 10, nil); len(g.Series) != 1 || g.Series[0].Count != 1 || len(g.Refs) != 1 {
		t.Fatalf("globex's stats = %+v, want its one denial only", g)
	}
	if o := l.stats("initech", 0, 180, 10, nil); len(o.Series)+len(o.Refs)+len(o.Reasons)+len(o.Revisions) != 0 {
		t.Fatalf("an org of no records sees %+v", o)
	}

	// A prune of seq 1..7 (acme's records at 0..60 s): gone from the answer at once, the
	// buckets counted again by the pass.
	if err := s.CheckpointPrune(ctx, store.PruneBoundary{Before: l.at(61), PrunedAt: now},
		[]store.ChainHead{{ChainID: "ch_stats", BaseSeq: 7, BaseHash: "h7", BaseMAC: "m7"}}); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := s.DeletePrunedAudit(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	pruned := []store.BucketCount{{Bucket: 0, Decision: "denied", Count: 1}, {Bucket: 1, Decision: "denied", Count: 3}}
	got := l.stats("acme", 0, 180, 10, nil)
	equal(t, "pruned, before the pass", got.Series, pruned)
	equal(t, "revisions after the prune", got.Revisions, []store.RevisionSpan{{Revision: "r1", First: l.at(30), Last: l.at(90)}})
	if p := l.advance(now); p.Recounted == 0 {
		t.Fatal("the pass counted no stale bucket again")
	}
	again := l.stats("acme", 0, 180, 10, nil)
	equal(t, "pruned, recounted", again, got)
	if g := l.stats("globex", 0, 180, 10, nil); len(g.Series) != 1 || g.Series[0].Count != 1 {
		t.Fatalf("globex's stats after acme's prune = %+v, want its one denial", g)
	}

	// The rollups keep a minute's buckets three hours: past that the pass drops them.
	l.advance(now.Add(4 * time.Hour))
	if st := l.stats("acme", 0, 180, 10, nil); len(st.Series) != 0 {
		t.Fatalf("minute buckets kept past their grain's keep: %+v", st.Series)
	}

	// A head far past the watermark: the answer reads store.AuditStatsTail seqs past it and
	// says how many of the org's records in the range it left. Another org's records past
	// the tail are no part of that count: the backlog of the whole log is not the org's to see.
	far := l.call("far", "acme", 7200, "kb:page.read@1", "allowed", "r1")
	far.Chain = store.ChainLink{ChainID: "ch_far", Seq: store.AuditStatsTail + 500, Hash: "hf"}
	near := l.call("near", "acme", 7200, "kb:page.read@1", "allowed", "r1")
	near.Chain = store.ChainLink{ChainID: "ch_far", Seq: 1, Hash: "hn"}
	other := l.call("other", "globex", 7201, "kb:page.read@1", "allowed", "r1")
	other.Chain = store.ChainLink{ChainID: "ch_far", Seq: store.AuditStatsTail + 501, Hash: "ho"}
	if err := s.AppendAudits(ctx, []store.AuditRecord{near, far, other}); err != nil {
		t.Fatal(err)
	}
	st := l.stats("acme", 7200, 7260, 10, nil)
	if st.Uncounted != 1 || len(st.Series) != 1 || st.Series[0].Count != 1 {
		t.Fatalf("past the tail: uncounted %d, series %+v; want 1 (the far record) and the near record", st.Uncounted, st.Series)
	}
	if g := l.stats("globex", 7200, 7260, 10, nil); g.Uncounted != 1 || len(g.Series) != 0 {
		t.Fatalf("globex past the tail: uncounted %d, series %+v; want its own one record uncounted, no more", g.Uncounted, g.Series)
	}
	if o := l.stats("initech", 7200, 7260, 10, nil); o.Uncounted != 0 {
		t.Fatalf("an org of no records sees %d records uncounted: another org's backlog", o.Uncounted)
	}
	if p, err := s.AdvanceAuditRollups(ctx, l.at(7300), 1<<20); err != nil || p.Folded != 3 || p.Left != 0 {
		t.Fatalf("the pass past the gap = %+v, %v; want 3 records folded, none left", p, err)
	}
	if st := l.stats("acme", 7200, 7260, 10, nil); st.Uncounted != 0 || st.Series[0].Count != 2 {
		t.Fatalf("after the pass: %+v", st)
	}
	if _, err := s.AdvanceAuditRollups(ctx, now, 0); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("AdvanceAuditRollups with no limit = %v, want ErrInvalid", err)
	}
}

// AuditRollupsAcrossRestart: the rollups and their watermarks are the store's, so a store
// opened again on the same database answers alike and folds nothing twice. open opens the
// same database each time; the test closes what it opens.
func AuditRollupsAcrossRestart(t *testing.T, open func() store.Store) {
	s := open()
	l := &statsLog{t: t, s: s, chained: true}
	for i := range 5 {
		l.add(l.call(fmt.Sprintf("x%d", i), "acme", i*20, "kb:page.read@1", "allowed", "r1"))
	}
	l.advance(l.at(300))
	before := l.stats("acme", 0, 180, 10, nil)
	s.Close()
	l.s = open()
	defer l.s.Close()
	equal(t, "after a restart", l.stats("acme", 0, 180, 10, nil), before)
	if p := l.advance(l.at(300)); p.Folded != 0 {
		t.Fatalf("the pass after a restart folded %d records again", p.Folded)
	}
	equal(t, "after a restart and a pass", l.stats("acme", 0, 180, 10, nil), before)
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
