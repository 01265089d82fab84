package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/approval"
	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/store"
)

// endCode is the code of a task's final answer, and its status.
func endCode(t *testing.T, tk approval.Task) (int, string) {
	t.Helper()
	if tk.End == nil {
		t.Fatalf("task %s (%s) has no end", tk.ID, tk.Status)
	}
	var b struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(tk.End.Body, &b)
	return tk.End.Status, b.Code
}

func TestTaskFollowsHeldCall(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, map[string]any{"requiresApproval": true})
	id := f.hold(t, bot)
	tk, err := f.app.Approvals.Task(ctx, bot, id)
	if err != nil || !tk.Waiting() || tk.End != nil || tk.ID != id || !tk.ExpiresAt.After(tk.CreatedAt) {
		t.Fatalf("held: %+v %v; want waiting, no end", tk, err)
	}
	if _, ferr := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id}); ferr != nil {
		t.Fatal(ferr)
	}
	tk, err = f.app.Approvals.Task(ctx, bot, id)
	if err != nil || tk.Status != store.ApprovalDone || tk.End == nil || tk.End.Status != http.StatusOK {
		t.Fatalf("approved: %+v %v; want done with a 200 answer", tk, err)
	}
	var res gateway.Result
	if err := json.Unmarshal(tk.End.Body, &res); err != nil || string(res.Output) != `{"commentId":"c1"}` || res.AuditID == "" {
		t.Fatalf("answer %s: want the run's output and audit id", tk.End.Body)
	}
}

func TestTaskEnds(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name       string
		end        func(f *fixture, id string)
		wantStatus int
		wantCode   string
		wantState  string
	}{
		{"rejected", func(f *fixture, id string) {
			if _, err := f.decide(approval.RefReject, alice, map[string]any{"approvalId": id, "reason": "wrong ticket"}); err != nil {
				t.Fatal(err)
			}
		}, http.StatusForbidden, approval.CodeRejected, store.ApprovalRejected},
		{"expired", func(f *fixture, _ string) { *f.clock = f.clock.Add(approval.DefaultTTL + time.Second) },
			http.StatusGone, approval.CodeExpired, store.ApprovalExpired},
		{"withdrawn", func(f *fixture, id string) {
			if err := f.app.Approvals.Withdraw(ctx, bot, id); err != nil {
				t.Fatal(err)
			}
		}, http.StatusGone, approval.CodeWithdrawn, store.ApprovalWithdrawn},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, map[string]any{"requiresApproval": true})
			id := f.hold(t, bot)
			tc.end(f, id)
			tk, err := f.app.Approvals.Task(ctx, bot, id)
			if err != nil || tk.Status != tc.wantState {
				t.Fatalf("task: %+v %v; want %s", tk, err, tc.wantState)
			}
			if st, code := endCode(t, tk); st != tc.wantStatus || code != tc.wantCode || f.runs.Load() != 0 {
				t.Fatalf("end: %d %s, runs %d; want %d %s, no run", st, code, f.runs.Load(), tc.wantStatus, tc.wantCode)
			}
			if tc.name == "rejected" && !strings.Contains(string(tk.End.Body), "wrong ticket") {
				t.Fatalf("rejection %s: want the approver's reason", tk.End.Body)
			}
		})
	}
}

// A withdrawn call is seen withdrawn by approvers, never runs, and the withdrawal is in the
// audit log as its requester's step.
func TestWithdrawIsFinalAndAudited(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, map[string]any{"requiresApproval": true})
	id := f.hold(t, bot)
	if err := f.app.Approvals.Withdraw(ctx, bot, id); err != nil {
		t.Fatal(err)
	}
	if err := f.app.Approvals.Withdraw(ctx, bot, id); err != nil {
		t.Fatalf("withdraw twice: %v; want the same acknowledgement", err)
	}
	if _, err := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id}); err == nil || err.Code != approval.CodeAlreadyDecided || f.runs.Load() != 0 {
		t.Fatalf("approve a withdrawn call: %v, runs %d; want %s, no run", err, f.runs.Load(), approval.CodeAlreadyDecided)
	}
	v, err := f.app.Approvals.Invocation(ctx, alice, id)
	if err != nil || v.Status != store.ApprovalWithdrawn || v.DecidedBy != "agent:support-bot" {
		t.Fatalf("approver's view: %+v %v; want withdrawn by its requester", v, err)
	}
	recs, err := f.app.Store.ListAudit(ctx, store.AuditQuery{Org: bot.Org, ParentID: v.AuditID, Decision: approval.DecisionWithdrawn})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].SubjectRef != "agent:support-bot" {
		t.Fatalf("no %q audit record linked to %s by the requester", approval.DecisionWithdrawn, v.AuditID)
	}
}

// Only the requester knows the task: another subject of the org (even the approver) and
// another org get exactly the answer of an unknown id, and withdraw nothing.
func TestTaskIsTheRequesters(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, map[string]any{"requiresApproval": true})
	id := f.hold(t, bot)
	otherOrg := bot
	otherOrg.Org = "other"
	if _, err := f.app.Approvals.Task(ctx, bot, "apr_unknownunknown0"); err == nil || err.Error() != approval.CodeNotFound+`: no task "apr_unknownunknown0"` {
		t.Fatalf("unknown id: %v", err)
	}
	for name, caller := range map[string]func() (approval.Task, error){
		"approver": func() (approval.Task, error) { return f.app.Approvals.Task(ctx, alice, id) },
		"other subject": func() (approval.Task, error) {
			return f.app.Approvals.Task(ctx, apptest.Exec("agent:other", "project", ""), id)
		},
		"other org": func() (approval.Task, error) { return f.app.Approvals.Task(ctx, otherOrg, id) },
	} {
		_, err := caller()
		var fe *fault.Error
		if !errors.As(err, &fe) || fe.Kind != fault.NotFound || fe.Code != approval.CodeNotFound || fe.Message != `no task "`+id+`"` {
			t.Fatalf("%s: %v; want not found, as an unknown id", name, err)
		}
	}
	if err := f.app.Approvals.Withdraw(ctx, alice, id); err == nil {
		t.Fatal("the approver withdrew the requester's call")
	}
	if tk, err := f.app.Approvals.Task(ctx, bot, id); err != nil || !tk.Waiting() {
		t.Fatalf("after others tried: %+v %v; want still waiting", tk, err)
	}
}

// What was approved is what runs: the approval re-decides with the current policy, and a
// call it now denies never runs; its task completes with that denial, as a synchronous call
// would have answered.
func TestTaskEndsWithDenialOfApprovalTime(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, map[string]any{"requiresApproval": true})
	id := f.hold(t, bot)
	biomes, err := f.app.Store.ListBiomeVersions(ctx, "ticketing")
	if err != nil || len(biomes) == 0 {
		t.Fatalf("ticketing versions: %v %v", biomes, err)
	}
	// The org narrows the grant to its org environment: the requester's project is out.
	req, _ := json.Marshal(map[string]any{"biomeId": "ticketing", "version": biomes[0].Version, "digestHash": biomes[0].DigestHash,
		"customize": map[string]any{ref: map[string]any{"requiresApproval": true, "environments": []string{"org"}}}})
	if _, err := f.app.Publisher.Install(ctx, req, bot.Org, "user:root"); err != nil {
		t.Fatal(err)
	}
	if err := f.app.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ferr := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id}); ferr != nil && ferr.Kind != fault.Denied {
		t.Fatalf("approve: %v", ferr)
	}
	tk, err := f.app.Approvals.Task(ctx, bot, id)
	if err != nil || tk.Status != store.ApprovalFailed {
		t.Fatalf("task: %+v %v; want failed", tk, err)
	}
	if st, code := endCode(t, tk); st != http.StatusForbidden || code != gateway.CodeDenied || f.runs.Load() != 0 {
		t.Fatalf("end: %d %s, runs %d; want the 403 %s of a synchronous call, no run", st, code, f.runs.Load(), gateway.CodeDenied)
	}
}

// A task observed while its approved call runs at the provider has no end yet: a client told
// "completed" with an error would retry, and the call would run twice.
func TestTaskMidRunHasNoEnd(t *testing.T) {
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	fx := apptest.New(t, apptest.Options{Customize: map[string]any{ref: map[string]any{"requiresApproval": true}},
		Provider: func(w http.ResponseWriter, _ *http.Request) {
			close(entered)
			<-release
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"commentId":"c1"}`))
		}})
	f := &fixture{app: fx.App, clock: fx.Now}
	id := f.hold(t, bot)
	done := make(chan *fault.Error, 1)
	go func() {
		_, err := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id})
		done <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the approved call never reached its provider")
	}
	tk, err := f.app.Approvals.Task(ctx, bot, id)
	close(release)
	if err != nil || tk.Status != store.ApprovalDispatched || tk.Waiting() || tk.End != nil {
		t.Fatalf("task mid-run: %+v %v; want dispatched, not waiting, no end", tk, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("approve: %v", err)
	}
	if tk, err = f.app.Approvals.Task(ctx, bot, id); err != nil || tk.End == nil || tk.End.Status != http.StatusOK {
		t.Fatalf("task after the run: %+v %v; want its 200 answer", tk, err)
	}
}

// Revoking a grant ends the calls held under it: withdrawn by the revoker, audited, the
// requester's task ended; granting the biome again later runs none of them.
func TestRevokeWithdrawsHeldCalls(t *testing.T) {
	ctx := context.Background()
	var fx *apptest.Fixture
	f := newFixtureWith(t, map[string]any{"requiresApproval": true}, &fx)
	ids := []string{f.hold(t, bot), f.hold(t, bot)}
	gs, err := f.app.Publisher.Grants(ctx, bot.Org, "")
	if err != nil || len(gs) != 1 {
		t.Fatalf("grants: %v %v", gs, err)
	}
	if _, err := f.app.Publisher.Revoke(ctx, bot.Org, gs[0].ID, "user:root"); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		tk, err := f.app.Approvals.Task(ctx, bot, id)
		if err != nil || tk.Status != store.ApprovalWithdrawn || !strings.Contains(tk.Withdrawn, "revoked by user:root") {
			t.Fatalf("task after the revoke: %+v %v; want withdrawn, naming the revoke", tk, err)
		}
		if st, code := endCode(t, tk); st != http.StatusGone || code != approval.CodeWithdrawn || !strings.Contains(string(tk.End.Body), gs[0].ID) {
			t.Fatalf("end: %d %s %s; want 410 %s naming grant %s", st, code, tk.End.Body, approval.CodeWithdrawn, gs[0].ID)
		}
		v, err := f.app.Approvals.Invocation(ctx, alice, id)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := f.app.Store.ListAudit(ctx, store.AuditQuery{Org: bot.Org, ParentID: v.AuditID, Decision: approval.DecisionWithdrawn})
		if err != nil || len(recs) != 1 || recs[0].SubjectRef != "user:root" {
			t.Fatalf("audit of the withdrawal: %+v %v; want one %q record by user:root", recs, err, approval.DecisionWithdrawn)
		}
	}
	fx.Regrant(t, map[string]any{ref: map[string]any{"requiresApproval": true}})
	for _, id := range ids {
		if _, ferr := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id}); ferr == nil || ferr.Code != approval.CodeAlreadyDecided {
			t.Fatalf("approve after a re-grant: %v; want %s", ferr, approval.CodeAlreadyDecided)
		}
	}
	if f.runs.Load() != 0 {
		t.Fatalf("%d runs; want none", f.runs.Load())
	}
}

// A held call is bound to the context it was held in: the same subject with a token of
// another environment, armed set or project gets the answer of an unknown id from its task,
// its cancellation and its invocation, and cancels nothing. An output is read only where a
// call could receive it: an org administrator with a session token reading a confidential
// output, and the requester once the grant admits public output only, are refused
// AUDIENCE_INCOMPATIBLE.
func TestHeldCallIsBoundToItsContext(t *testing.T) {
	ctx := context.Background()
	var fx *apptest.Fixture
	f := newFixtureOf(t, apptest.Options{Classification: "confidential",
		Customize: map[string]any{ref: map[string]any{"requiresApproval": true}}}, &fx)
	id := f.hold(t, bot)
	public := bot
	public.Environment = "public-session"
	narrower := bot
	narrower.Armed = []string{"ticket:*"}
	otherProject := bot
	otherProject.Project = "acme-web"
	same := bot
	same.Armed = []string{"*", "*"} // the same set, written otherwise
	unknown := func(err error, what string) {
		t.Helper()
		var fe *fault.Error
		if !errors.As(err, &fe) || fe.Kind != fault.NotFound || fe.Code != approval.CodeNotFound || !strings.Contains(fe.Message, what) {
			t.Fatalf("%v; want not found, as an unknown id", err)
		}
	}
	for _, ec := range []identity.ExecContext{public, narrower, otherProject} {
		_, err := f.app.Approvals.Task(ctx, ec, id)
		unknown(err, `no task "`+id+`"`)
		unknown(f.app.Approvals.Withdraw(ctx, ec, id), `no task "`+id+`"`)
		_, err = f.app.Approvals.Invocation(ctx, ec, id)
		unknown(err, `no invocation "`+id+`"`)
	}
	if tk, err := f.app.Approvals.Task(ctx, same, id); err != nil || !tk.Waiting() {
		t.Fatalf("the held call's own context: %+v %v; want it still waiting", tk, err)
	}
	if _, ferr := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id}); ferr != nil {
		t.Fatal(ferr)
	}
	if v, err := f.app.Approvals.Invocation(ctx, bot, id); err != nil || string(v.Output) != `{"commentId":"c1"}` {
		t.Fatalf("the requester's invocation: %+v %v; want its output", v, err)
	}
	sessionAdmin := alice
	sessionAdmin.Environment = "session"
	if v, err := f.app.Approvals.Invocation(ctx, sessionAdmin, id); !isAudience(err) {
		t.Fatalf("an administrator with a session token: %+v %v; want %s", v, err, approval.CodeAudienceIncompatible)
	}
	fx.Regrant(t, map[string]any{ref: map[string]any{"requiresApproval": true, "audience": []string{"public"}}})
	tk, err := f.app.Approvals.Task(ctx, bot, id)
	if err != nil || tk.Status != store.ApprovalDone {
		t.Fatalf("task: %+v %v; want done", tk, err)
	}
	if st, code := endCode(t, tk); st != http.StatusForbidden || code != approval.CodeAudienceIncompatible || strings.Contains(string(tk.End.Body), "c1") {
		t.Fatalf("task end once the grant admits public output only: %d %s %s; want 403 %s, no output", st, code, tk.End.Body, approval.CodeAudienceIncompatible)
	}
	if v, err := f.app.Approvals.Invocation(ctx, bot, id); !isAudience(err) {
		t.Fatalf("the requester's invocation: %+v %v; want %s", v, err, approval.CodeAudienceIncompatible)
	}
}

func isAudience(err error) bool {
	var fe *fault.Error
	return errors.As(err, &fe) && fe.Kind == fault.Denied && fe.Code == approval.CodeAudienceIncompatible
}

// A call its revoke left held (the withdrawals failed, or a replica held it before it learned
// of the revoke) is withdrawn when the biome is granted again, before the new grant is
// recorded: it never runs under a grant it was not held under.
func TestRegrantWithdrawsCallsARevokeLeft(t *testing.T) {
	ctx := context.Background()
	var fx *apptest.Fixture
	f := newFixtureWith(t, map[string]any{"requiresApproval": true}, &fx)
	id := f.hold(t, bot)
	gs, err := f.app.Publisher.Grants(ctx, bot.Org, "")
	if err != nil || len(gs) != 1 {
		t.Fatalf("grants: %v %v", gs, err)
	}
	// Revoked in the store only: no withdrawal ran.
	if _, err := f.app.Store.RevokeGrant(ctx, bot.Org, gs[0].ID, "user:root", time.Now()); err != nil {
		t.Fatal(err)
	}
	if tk, err := f.app.Approvals.Task(ctx, bot, id); err != nil || !tk.Waiting() {
		t.Fatalf("before the re-grant: %+v %v; want still pending", tk, err)
	}
	fx.Regrant(t, map[string]any{ref: map[string]any{"requiresApproval": true}})
	if tk, err := f.app.Approvals.Task(ctx, bot, id); err != nil || tk.Status != store.ApprovalWithdrawn {
		t.Fatalf("after the re-grant: %+v %v; want withdrawn", tk, err)
	}
	if _, ferr := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id}); ferr == nil || ferr.Code != approval.CodeAlreadyDecided || f.runs.Load() != 0 {
		t.Fatalf("approve under the new grant: %v, runs %d; want %s, no run", ferr, f.runs.Load(), approval.CodeAlreadyDecided)
	}
}
