package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/app"
	"github.com/xemahq/xema/internal/approval"
	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/notify"
	"github.com/xemahq/xema/internal/store"
)

const ref = "ticket:comment.add@1"

// fixture is a whole gateway (SQLite) with the ticketing test biome served by a provider
// that counts its calls, granted with approval required for ref.
type fixture struct {
	app   *app.App
	runs  *atomic.Int32
	clock *time.Time
	calls atomic.Int32 // distinct held calls made by hold
}

func newFixture(t *testing.T, customize map[string]any) *fixture {
	t.Helper()
	return newFixtureWith(t, customize, nil)
}

// newFixtureWith is newFixture keeping the apptest fixture in *fx (when fx is not nil), told
// of held calls as notifications say.
func newFixtureWith(t *testing.T, customize map[string]any, fx **apptest.Fixture, notifications ...notify.Config) *fixture {
	t.Helper()
	o := apptest.Options{Customize: map[string]any{ref: customize}}
	for _, n := range notifications {
		o.Notify = n
	}
	return newFixtureOf(t, o, fx)
}

// newFixtureOf is the fixture of o, its provider counting its calls; the apptest fixture is
// kept in *fx when fx is not nil.
func newFixtureOf(t *testing.T, o apptest.Options, fx **apptest.Fixture) *fixture {
	t.Helper()
	var runs atomic.Int32
	o.Provider = func(w http.ResponseWriter, _ *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"commentId":"c1"}`))
	}
	f := apptest.New(t, o)
	if fx != nil {
		*fx = f
	}
	return &fixture{app: f.App, runs: &runs, clock: f.Now}
}

var exec = apptest.Exec

var (
	bot   = exec("agent:support-bot", "project", "")
	alice = exec("user:alice", "org", "org_admin")
)

// otherOrg is ec in another org: the held calls of the default org are unknown to it.
func otherOrg(ec identity.ExecContext) identity.ExecContext {
	ec.Org = "acme"
	return ec
}

// hold makes an approval-requiring call as requester, another each time (an identical one
// would join the one pending), and returns its approval id.
func (f *fixture) hold(t *testing.T, requester identity.ExecContext) string {
	t.Helper()
	res, err := f.app.Gateway.Invoke(context.Background(), requester, gateway.Request{Ref: ref,
		Input: fmt.Appendf(nil, `{"ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88","text":"hi %d"}`, f.calls.Add(1))})
	if err != nil || res.Held == nil || res.Held.ApprovalID == "" || res.AuditID == "" {
		t.Fatalf("held call: %+v %v, want held with approval and audit ids", res, err)
	}
	return res.Held.ApprovalID
}

// decide calls approval:approve@1 or approval:reject@1 through the funnel.
func (f *fixture) decide(capRef string, by identity.ExecContext, input map[string]any) (approval.View, *fault.Error) {
	raw, _ := json.Marshal(input)
	res, err := f.app.Gateway.Invoke(context.Background(), by, gateway.Request{Ref: capRef, Input: raw})
	if err != nil {
		var ge *fault.Error
		errors.As(err, &ge)
		return approval.View{}, ge
	}
	if res.Denial != nil { // judged like an error of kind Denied
		return approval.View{}, &fault.Error{Kind: fault.Denied, Code: res.Denial.Code, AuditID: res.AuditID}
	}
	var v approval.View
	_ = json.Unmarshal(res.Output, &v)
	return v, nil
}

func TestWhoMayApprove(t *testing.T) {
	cases := []struct {
		name      string
		customize map[string]any
		requester identity.ExecContext
		approver  identity.ExecContext
		wantCode  string // "" means approved and run
	}{
		{"org admin covered by the grant", map[string]any{"requiresApproval": true}, bot, alice, ""},
		{"an agent may not decide", map[string]any{"requiresApproval": true}, bot, exec("agent:helper", "project", ""), gateway.CodeDenied},
		{"never the requester", map[string]any{"requiresApproval": true}, exec("user:bob", "project", "org_member"), exec("user:bob", "project", "org_member"), approval.CodeOwnApproval},
		{"a person the grant does not cover", map[string]any{"requiresApproval": true, "subjects": []string{"agent:support-bot"}}, bot, alice, approval.CodeNotApprover},
		{"a person the grant names", map[string]any{"requiresApproval": true, "subjects": []string{"agent:support-bot", "user:carol"}}, bot, exec("user:carol", "project", "org_member"), ""},
		{"outside the grant's environments", map[string]any{"requiresApproval": true, "environments": []string{"project"}}, bot, alice, approval.CodeNotApprover},
		{"an admin of another org", map[string]any{"requiresApproval": true}, bot, otherOrg(alice), approval.CodeNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.customize)
			id := f.hold(t, tc.requester)
			v, err := f.decide(approval.RefApprove, tc.approver, map[string]any{"approvalId": id})
			switch {
			case tc.wantCode == "" && (err != nil || v.Status != store.ApprovalDone || f.runs.Load() != 1):
				t.Fatalf("approve: %v, view %+v, runs %d; want done, run once", err, v, f.runs.Load())
			case tc.wantCode != "" && (err == nil || err.Code != tc.wantCode || f.runs.Load() != 0):
				t.Fatalf("approve: %v; want %s and no run (runs %d)", err, tc.wantCode, f.runs.Load())
			}
		})
	}
}

func TestConcurrentApprovesRunOnce(t *testing.T) {
	f := newFixture(t, map[string]any{"requiresApproval": true})
	id := f.hold(t, bot)
	var done, conflicts atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id})
			switch {
			case err == nil && v.Status == store.ApprovalDone:
				done.Add(1)
			case err != nil && err.Code == approval.CodeAlreadyDecided && err.Kind == fault.Conflict:
				conflicts.Add(1)
			default:
				t.Errorf("approve: %v %+v", err, v)
			}
		}()
	}
	wg.Wait()
	if done.Load() != 1 || conflicts.Load() != 19 || f.runs.Load() != 1 {
		t.Fatalf("20 approves: %d done, %d conflicts, %d runs; want 1, 19, 1", done.Load(), conflicts.Load(), f.runs.Load())
	}
}

func TestExpiredNeverRuns(t *testing.T) {
	f := newFixture(t, map[string]any{"requiresApproval": true})
	id := f.hold(t, bot)
	*f.clock = f.clock.Add(time.Hour + time.Second)
	_, err := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id})
	if err == nil || err.Code != approval.CodeExpired || err.Kind != fault.Gone || f.runs.Load() != 0 {
		t.Fatalf("approve after the TTL: %v, runs %d; want 410 %s, no run", err, f.runs.Load(), approval.CodeExpired)
	}
	v, verr := f.app.Approvals.Invocation(context.Background(), bot, id)
	if verr != nil || v.Status != store.ApprovalExpired {
		t.Fatalf("invocation: %+v %v; want expired", v, verr)
	}
	if _, err := f.decide(approval.RefReject, alice, map[string]any{"approvalId": id, "reason": "late"}); err == nil || err.Code != approval.CodeAlreadyDecided {
		t.Fatalf("reject after expiry: %v; want %s", err, approval.CodeAlreadyDecided)
	}
}

func TestRejectNeverRuns(t *testing.T) {
	f := newFixture(t, map[string]any{"requiresApproval": true})
	id := f.hold(t, bot)
	if _, err := f.decide(approval.RefReject, alice, map[string]any{"approvalId": id}); err == nil || err.Code != gateway.CodeInvalidInput {
		t.Fatalf("reject without a reason: %v; want %s", err, gateway.CodeInvalidInput)
	}
	v, err := f.decide(approval.RefReject, alice, map[string]any{"approvalId": id, "reason": "wrong ticket"})
	if err != nil || v.Status != store.ApprovalRejected || v.Reason != "wrong ticket" || v.DecidedBy != "user:alice" {
		t.Fatalf("reject: %v %+v", err, v)
	}
	if _, err := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id}); err == nil || err.Code != approval.CodeAlreadyDecided || f.runs.Load() != 0 {
		t.Fatalf("approve after reject: %v, runs %d", err, f.runs.Load())
	}
}

// The periodic recovery (RecoverLeases) leaves alone an approval this replica is running
// now: only a start-up Recover, or an ended lease, may take it.
func TestPeriodicRecoveryLeavesLiveRun(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	fx := apptest.New(t, apptest.Options{Customize: map[string]any{ref: map[string]any{"requiresApproval": true}},
		Provider: func(w http.ResponseWriter, _ *http.Request) {
			if runs.Add(1) == 1 {
				close(entered)
			}
			<-release
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"commentId":"c1"}`))
		}})
	f := &fixture{app: fx.App, runs: &runs, clock: fx.Now}
	id := f.hold(t, bot)
	type result struct {
		v   approval.View
		err *fault.Error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id})
		done <- result{v, err}
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the approved call never reached its provider")
	}
	n, err := f.app.Approvals.RecoverLeases(context.Background())
	close(release)
	if err != nil || n != 0 {
		t.Fatalf("periodic recovery during a live run: moved %d, %v; want 0", n, err)
	}
	r := <-done
	if r.err != nil || r.v.Status != store.ApprovalDone || runs.Load() != 1 {
		t.Fatalf("approve: %+v %v, runs %d; want done, one run", r.v, r.err, runs.Load())
	}
}

// A grant customized with resources binds its held calls to them, and they can be approved:
// the approver is judged on the held call's resource, as its requester was.
func TestResourceGrantHeldCallIsApprovable(t *testing.T) {
	f := newFixtureOf(t, apptest.Options{ResourceTicket: true,
		Customize: map[string]any{ref: map[string]any{"requiresApproval": true, "resources": []string{"3f1c2a9e-*"}}}}, nil)
	res, err := f.app.Gateway.Invoke(context.Background(), bot, gateway.Request{Ref: ref,
		Input: json.RawMessage(`{"ticketId":"0a1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88","text":"hi"}`)})
	if err != nil || res.Denial == nil {
		t.Fatalf("a ticket outside the granted resources: %+v %v; want denied", res, err)
	}
	id := f.hold(t, bot)
	v, ferr := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id})
	if ferr != nil || v.Status != store.ApprovalDone || f.runs.Load() != 1 {
		t.Fatalf("approve: %v, view %+v, runs %d; want done, run once", ferr, v, f.runs.Load())
	}
}

// What the approver was shown is what runs: a call held under one biome version, approved
// once the org's grant pins another, is refused VERSION_CHANGED and never runs; its
// requester's task ends with the same refusal.
func TestApprovedCallRunsOnlyTheVersionItWasHeldUnder(t *testing.T) {
	ctx := context.Background()
	var fx *apptest.Fixture
	f := newFixtureWith(t, map[string]any{"requiresApproval": true}, &fx)
	id := f.hold(t, bot)
	held, err := f.app.Approvals.Invocation(ctx, alice, id)
	if err != nil || held.BiomeVersion != "1.0.0" {
		t.Fatalf("held call: %+v %v; want held under 1.0.0", held, err)
	}
	fx.Upgrade(t, "1.1.0", map[string]any{ref: map[string]any{"requiresApproval": true}})
	_, ferr := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id})
	if ferr == nil || ferr.Code != gateway.CodeVersionChanged || ferr.Kind != fault.Conflict || f.runs.Load() != 0 {
		t.Fatalf("approve after the upgrade: %v, runs %d; want 409 %s, no run", ferr, f.runs.Load(), gateway.CodeVersionChanged)
	}
	tk, err := f.app.Approvals.Task(ctx, bot, id)
	if err != nil || tk.Status != store.ApprovalFailed {
		t.Fatalf("task: %+v %v; want failed", tk, err)
	}
	if st, code := endCode(t, tk); st != http.StatusConflict || code != gateway.CodeVersionChanged {
		t.Fatalf("task end: %d %s; want 409 %s", st, code, gateway.CodeVersionChanged)
	}
	// Held again now, the call is held under the version serving, and runs when approved.
	id = f.hold(t, bot)
	if v, ferr := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id}); ferr != nil || v.Status != store.ApprovalDone || v.BiomeVersion != "1.1.0" || f.runs.Load() != 1 {
		t.Fatalf("approve a call held under 1.1.0: %+v %v, runs %d; want done once", v, ferr, f.runs.Load())
	}
}

// One subject cannot fill the approvers' queue: beyond MaxPending pending calls, however
// many arrive at once, a call is refused 429 TOO_MANY_PENDING, audited, and not held; other
// subjects still hold calls, and a decision frees a place.
func TestPendingCallsBoundedPerSubject(t *testing.T) {
	ctx := context.Background()
	const bound, calls = 3, 24
	f := newFixtureOf(t, apptest.Options{MaxPending: bound, Customize: map[string]any{ref: map[string]any{"requiresApproval": true}}}, nil)
	var held, refused atomic.Int32
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Distinct calls: an identical one would join the one pending (TestIdenticalCallsJoinThePendingOne).
			input := fmt.Appendf(nil, `{"ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88","text":"hi %d"}`, i)
			res, err := f.app.Gateway.Invoke(ctx, bot, gateway.Request{Ref: ref, Input: input})
			var fe *fault.Error
			switch {
			case err == nil && res.Held != nil:
				held.Add(1)
			case errors.As(err, &fe) && fe.Code == approval.CodeTooManyPending && fe.Kind == fault.RateLimited && fe.AuditID != "":
				refused.Add(1)
			default:
				t.Errorf("call: %+v %v; want held or %s", res, err, approval.CodeTooManyPending)
			}
		}()
	}
	wg.Wait()
	if held.Load() != bound || refused.Load() != calls-bound {
		t.Fatalf("%d calls at once: %d held, %d refused; want %d held", calls, held.Load(), refused.Load(), bound)
	}
	pending, err := f.app.Store.ListApprovals(ctx, store.ApprovalFilter{Org: bot.Org, RequesterRef: bot.Subject.Ref})
	if err != nil || len(pending) != bound {
		t.Fatalf("stored held calls: %d %v; want %d, nothing of the refused ones", len(pending), err, bound)
	}
	recs, err := f.app.Store.ListAudit(ctx, store.AuditQuery{Org: bot.Org, Ref: ref, Decision: audit.DecisionDenied})
	if err != nil || len(recs) != calls-bound || recs[0].Outcome != approval.CodeTooManyPending {
		t.Fatalf("audit of the refusals: %d %v; want %d denied %s", len(recs), err, calls-bound, approval.CodeTooManyPending)
	}
	f.hold(t, exec("agent:other-bot", "project", "")) // the bound is per subject
	if _, ferr := f.decide(approval.RefReject, alice, map[string]any{"approvalId": pending[0].ID, "reason": "flood"}); ferr != nil {
		t.Fatal(ferr)
	}
	f.hold(t, bot) // a decision frees a place
}
