package approval_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/approval"
	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/notify"
	"github.com/xemahq/xema/internal/store"
)

// list calls approval:list@1 through the funnel as by.
func (f *fixture) list(t *testing.T, by identity.ExecContext, input map[string]any) (approval.Page, *fault.Error) {
	t.Helper()
	raw, _ := json.Marshal(input)
	res, err := f.app.Gateway.Invoke(context.Background(), by, gateway.Request{Ref: approval.RefList, Input: raw})
	if err != nil {
		ge, _ := err.(*fault.Error)
		return approval.Page{}, ge
	}
	if res.Denial != nil {
		return approval.Page{}, &fault.Error{Kind: fault.Denied, Code: res.Denial.Code}
	}
	var p approval.Page
	if err := json.Unmarshal(res.Output, &p); err != nil {
		t.Fatal(err)
	}
	return p, nil
}

// The list tells each viewer whether they may decide each call, and why not: the
// environment they lack, or that the call is their own. Deciding anyway is the same 403.
func TestListSaysWhoMayDecide(t *testing.T) {
	f := newFixture(t, map[string]any{"requiresApproval": true, "environments": []string{"project"}})
	id := f.hold(t, bot)
	bobAdmin := exec("user:bob", "project", "org_admin")
	own := f.hold(t, bobAdmin)

	p, err := f.list(t, alice, map[string]any{"status": "pending"})
	if err != nil || len(p.Approvals) != 2 {
		t.Fatalf("alice's list: %+v %v", p, err)
	}
	for _, v := range p.Approvals {
		if v.SideEffects != "Adds a comment the customer can read." {
			t.Fatalf("the listed held call says its side effects are %q; want the capability's", v.SideEffects)
		}
		if v.CanDecide == nil || *v.CanDecide || v.WhyNot == nil || v.WhyNot.Code != approval.CodeNotApprover ||
			!strings.Contains(v.WhyNot.Message, "not granted in org") || len(v.WhyNot.Reasons) == 0 {
			t.Fatalf("alice (environment org) sees %+v; want canDecide false, NOT_AN_APPROVER naming environment org", v)
		}
	}
	_, derr := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id})
	if derr == nil || derr.Kind != fault.Denied || derr.Code != approval.CodeNotApprover || !strings.Contains(derr.Message, "not granted in org") {
		t.Fatalf("alice approves: %+v; want 403 NOT_AN_APPROVER naming what she lacks", derr)
	}
	_, derr = f.decide(approval.RefReject, alice, map[string]any{"approvalId": id, "reason": "no"})
	if derr == nil || derr.Code != approval.CodeNotApprover {
		t.Fatalf("alice rejects: %+v; want NOT_AN_APPROVER", derr)
	}

	p, err = f.list(t, bobAdmin, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range p.Approvals {
		switch {
		case v.ApprovalID == own && (*v.CanDecide || v.WhyNot.Code != approval.CodeOwnApproval):
			t.Errorf("bob's own call: %+v; want OWN_APPROVAL", v)
		case v.ApprovalID == id && (!*v.CanDecide || v.WhyNot != nil):
			t.Errorf("bob (environment project) on the bot's call: %+v; want canDecide", v)
		}
	}
	one, err := f.list(t, bobAdmin, map[string]any{"approvalId": id})
	if err != nil || len(one.Approvals) != 1 || one.Approvals[0].BiomeVersion == "" || one.Approvals[0].PolicyRevision == "" ||
		one.Approvals[0].RiskTier == "" || one.Approvals[0].Input == nil {
		t.Fatalf("one call by id: %+v %v; want it with biome version, policy revision, risk tier and input", one, err)
	}
	if other, err := f.list(t, otherOrg(alice), map[string]any{"approvalId": id}); err != nil || len(other.Approvals) != 0 {
		t.Fatalf("another org asks for the call by id: %+v %v; want nothing", other, err)
	}
	// A member who is no administrator sees only the calls they may decide: carol (environment
	// project) the bot's and bob's, not her own; dave (environment org) none, and no call
	// he may not decide by id either.
	carol := exec("user:carol", "project", "org_member")
	mine := f.hold(t, carol)
	p, err = f.list(t, carol, map[string]any{"limit": 1})
	if err != nil || len(p.Approvals) != 1 || !*p.Approvals[0].CanDecide || p.NextCursor == "" {
		t.Fatalf("carol's first page: %+v %v; want one call she may decide and a next page", p, err)
	}
	seen := []string{p.Approvals[0].ApprovalID}
	p, err = f.list(t, carol, map[string]any{"limit": 1, "cursor": p.NextCursor})
	if err != nil || len(p.Approvals) != 1 || !*p.Approvals[0].CanDecide {
		t.Fatalf("carol's second page: %+v %v", p, err)
	}
	seen = append(seen, p.Approvals[0].ApprovalID)
	if !slices.Contains(seen, id) || !slices.Contains(seen, own) || slices.Contains(seen, mine) {
		t.Fatalf("carol sees %v; want the bot's %s and bob's %s, not her own %s", seen, id, own, mine)
	}
	dave := exec("user:dave", "org", "org_member")
	if p, err := f.list(t, dave, map[string]any{}); err != nil || len(p.Approvals) != 0 || p.NextCursor != "" {
		t.Fatalf("dave (environment org, a member) sees %+v %v; want nothing", p, err)
	}
	if p, err := f.list(t, dave, map[string]any{"approvalId": id}); err != nil || len(p.Approvals) != 0 {
		t.Fatalf("dave asks for a call he may not decide by id: %+v %v; want nothing", p, err)
	}
	if _, err := f.decide(approval.RefApprove, bobAdmin, map[string]any{"approvalId": id}); err != nil || f.runs.Load() != 1 {
		t.Fatalf("bob approves: %v, runs %d", err, f.runs.Load())
	}
}

// Approving re-decides with the current policy: a grant changed since the call was held
// now denies it, the approver is answered that denial, and the call never runs.
func TestApproveRedecides(t *testing.T) {
	var fx *apptest.Fixture
	f := newFixtureWith(t, map[string]any{"requiresApproval": true}, &fx)
	id := f.hold(t, bot)
	fx.Regrant(t, map[string]any{ref: map[string]any{"requiresApproval": true, "environments": []string{"org"}}})
	_, err := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id})
	if err == nil || err.Kind != fault.Denied || err.Code != gateway.CodeDenied || !strings.Contains(err.Message, "ENVIRONMENT_NOT_ALLOWED") ||
		!strings.Contains(err.Message, "did not run") || f.runs.Load() != 0 {
		t.Fatalf("approve under the new grant: %+v, runs %d; want 403 DENIED for ENVIRONMENT_NOT_ALLOWED, no run", err, f.runs.Load())
	}
	v, verr := f.app.Approvals.Invocation(context.Background(), bot, id)
	if verr != nil || v.Status != store.ApprovalFailed || v.Outcome != gateway.CodeDenied {
		t.Fatalf("the call after the refused run: %+v %v; want failed with the denial's code", v, verr)
	}
}

// Every held call is found, a page at a time, each once; a cursor the gateway did not
// write is a typed 400.
func TestListPages(t *testing.T) {
	f := newFixture(t, map[string]any{"requiresApproval": true})
	held := map[string]bool{}
	for range 7 {
		held[f.hold(t, bot)] = true
	}
	seen := map[string]bool{}
	cursor := ""
	for pages := 1; ; pages++ {
		in := map[string]any{"limit": 3}
		if cursor != "" {
			in["cursor"] = cursor
		}
		p, err := f.list(t, alice, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range p.Approvals {
			if seen[v.ApprovalID] || !held[v.ApprovalID] {
				t.Fatalf("page %d lists %s again or unknown", pages, v.ApprovalID)
			}
			seen[v.ApprovalID] = true
		}
		if p.NextCursor == "" {
			if pages != 3 || len(seen) != 7 {
				t.Fatalf("%d pages, %d calls; want 3 pages, all 7", pages, len(seen))
			}
			break
		}
		cursor = p.NextCursor
	}
	for _, bad := range []string{"nope", "MTIz", "eHl6LmFwcl8x"} {
		if _, err := f.list(t, alice, map[string]any{"cursor": bad}); err == nil || err.Code != approval.CodeInvalidCursor || err.Kind != fault.Invalid {
			t.Errorf("cursor %q: %+v; want 400 %s", bad, err, approval.CodeInvalidCursor)
		}
	}
}

// hook records the events a webhook receives.
type hook struct {
	mu     sync.Mutex
	events []notify.Payload
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if notify.Verify(hookSecret, r.Header.Get("X-Xema-Signature"), body, time.Now(), 3*time.Hour) != nil {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var p notify.Payload
	_ = json.Unmarshal(body, &p)
	h.mu.Lock()
	h.events = append(h.events, p)
	h.mu.Unlock()
}

func (h *hook) kinds(id string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, p := range h.events {
		if p.ApprovalID == id {
			out = append(out, p.Event+":"+p.Status)
		}
	}
	return out
}

var hookSecret = []byte("approval-hook-secret-0123456789")

// Each step of a held call is told: held, decided (with the decision), expired (by the
// sweep, nobody asking), withdrawn; never with the input.
func TestNotifiedSteps(t *testing.T) {
	h := &hook{}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	var fx *apptest.Fixture
	f := newFixtureWith(t, map[string]any{"requiresApproval": true}, &fx, notify.Config{ConsoleURL: "https://xema.example",
		Webhooks: []notify.Webhook{{URL: srv.URL, Secret: hookSecret}}})
	ctx := context.Background()
	deliver := func() {
		t.Helper()
		if _, err := f.app.Notify.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rejected, expiring, withdrawn := f.hold(t, bot), f.hold(t, bot), f.hold(t, bot)
	deliver()
	if _, err := f.decide(approval.RefReject, alice, map[string]any{"approvalId": rejected, "reason": "not now"}); err != nil {
		t.Fatal(err)
	}
	if err := f.app.Approvals.Withdraw(ctx, bot, withdrawn); err != nil {
		t.Fatal(err)
	}
	*f.clock = f.clock.Add(2 * time.Hour)
	if n, err := f.app.Approvals.ExpireDue(ctx); err != nil || n != 1 {
		t.Fatalf("expiry sweep: %d %v; want the one still pending", n, err)
	}
	deliver()
	for id, want := range map[string]string{rejected: "held:pending decided:rejected", expiring: "held:pending expired:expired",
		withdrawn: "held:pending withdrawn:withdrawn"} {
		if got := strings.Join(h.kinds(id), " "); got != want {
			t.Errorf("events of %s: %q, want %q", id, got, want)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.events {
		if p.Input != nil || p.ConsoleURL != "https://xema.example/console/approvals/"+p.ApprovalID || p.RiskTier == "" {
			t.Errorf("event %+v: want no input, the deep link and the risk tier", p)
		}
		if p.Event == notify.KindDecided && (p.DecidedBy != "user:alice" || p.Reason != "not now") {
			t.Errorf("decided event %+v: want who decided and why", p)
		}
	}
}

// TestInvocationNotReadByEveryMember: approval:list@1 admits every member now, yet a member
// reads another's held call only when they may decide it (as listing shows them), never by
// membership alone.
func TestInvocationNotReadByEveryMember(t *testing.T) {
	f := newFixture(t, map[string]any{"requiresApproval": true, "environments": []string{"project"}})
	id := f.hold(t, bot)
	dave := exec("user:dave", "org", "org_member")
	if v, err := f.app.Approvals.Invocation(context.Background(), dave, id); err == nil {
		t.Fatalf("dave (a member who may not decide it) reads the bot's call: %+v", v)
	}
	carol := exec("user:carol", "project", "org_member")
	if _, err := f.app.Approvals.Invocation(context.Background(), carol, id); err != nil {
		t.Fatalf("carol (who may decide it) reads the bot's call: %v", err)
	}
	if _, err := f.app.Approvals.Invocation(context.Background(), alice, id); err != nil {
		t.Fatalf("alice (an org admin) reads the bot's call: %v", err)
	}

	// Decided by erin: its input and output are hers (and the admins') to read, no longer
	// every member who could have decided it.
	erin := exec("user:erin", "project", "org_member")
	if _, ferr := f.decide(approval.RefApprove, erin, map[string]any{"approvalId": id}); ferr != nil {
		t.Fatalf("erin approves: %v", ferr)
	}
	if v, err := f.app.Approvals.Invocation(context.Background(), carol, id); err == nil {
		t.Fatalf("carol reads the call erin decided: %+v", v)
	}
	if v, err := f.app.Approvals.Invocation(context.Background(), erin, id); err != nil || v.Status != store.ApprovalDone {
		t.Fatalf("erin reads the call she decided: %+v, %v", v, err)
	}
	if _, err := f.app.Approvals.Invocation(context.Background(), alice, id); err != nil {
		t.Fatalf("alice (an org admin) reads the decided call: %v", err)
	}
	// The listing likewise: a member's, whatever status it names, holds no decided call.
	for _, in := range []map[string]any{{"status": store.ApprovalDone}, {}} {
		if p, ferr := f.list(t, carol, in); ferr != nil || len(p.Approvals) != 0 || p.NextCursor != "" {
			t.Errorf("carol lists %v: %+v, %v; want an empty page", in, p, ferr)
		}
	}
	if p, ferr := f.list(t, alice, map[string]any{"status": store.ApprovalDone}); ferr != nil || len(p.Approvals) != 1 {
		t.Errorf("alice lists the done calls: %+v, %v; want the one erin approved", p, ferr)
	}
}
