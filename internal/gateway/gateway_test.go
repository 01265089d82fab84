package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/ratelimit"
	"github.com/xemahq/xema/internal/runner"
)

const commentRef = "ticket:comment.add@1"

var comment = json.RawMessage(`{"ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88","text":"hi"}`)

// TestFunnelExits has one row per way out of the funnel: each answer (a result that ran, a
// denial, a hold, or an error of a kind), its code, the audit record it names (decision), and
// whether the provider was called.
func TestFunnelExits(t *testing.T) {
	bot := apptest.Exec("agent:support-bot", "project", "")
	failing := func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":"down"}`, http.StatusInternalServerError)
	}
	for _, tc := range []struct {
		name      string
		customize map[string]any
		provider  http.HandlerFunc
		deps      func(d *gateway.Deps) // changes the funnel's parts
		req       gateway.Request
		repeat    int        // calls made before the one judged
		verdict   string     // ran, denied, limited, held or error
		kind      fault.Kind // of an error
		code      string
		decision  string
		runs      bool
	}{
		{name: "200 ran", req: gateway.Request{Ref: commentRef, Input: comment}, verdict: "ran", decision: "allowed", runs: true},
		{name: "404 unknown ref", req: gateway.Request{Ref: "ticket:nothing@1", Input: comment}, verdict: "error", kind: fault.NotFound,
			code: gateway.CodeUnknownCapability, decision: "unknown-capability"},
		{name: "403 denied", customize: map[string]any{commentRef: map[string]any{"subjects": []string{"agent:other"}}},
			req: gateway.Request{Ref: commentRef, Input: comment}, verdict: "denied", code: gateway.CodeDenied, decision: "denied"},
		{name: "400 invalid input", req: gateway.Request{Ref: commentRef, Input: json.RawMessage(`{"ticketId":"x"}`)},
			verdict: "error", kind: fault.Invalid, code: gateway.CodeInvalidInput, decision: "invalid-input"},
		{name: "429 over the rate limit", customize: map[string]any{commentRef: map[string]any{"rateLimit": map[string]any{"requests": 1, "per": "1m"}}},
			repeat: 1, req: gateway.Request{Ref: commentRef, Input: comment}, verdict: "limited", code: ratelimit.CodeRateLimited, decision: "denied"},
		{name: "202 held for approval", customize: map[string]any{commentRef: map[string]any{"requiresApproval": true}},
			req: gateway.Request{Ref: commentRef, Input: comment}, verdict: "held", code: gateway.CodePendingApproval, decision: "pending-approval"},
		{name: "503 no approval queue", customize: map[string]any{commentRef: map[string]any{"requiresApproval": true}},
			deps: func(d *gateway.Deps) { d.Approvals = nil },
			req:  gateway.Request{Ref: commentRef, Input: comment}, verdict: "error", kind: fault.Unavailable, code: gateway.CodeApprovalUnavailable, decision: "error"},
		{name: "502 provider failed", provider: failing, req: gateway.Request{Ref: commentRef, Input: comment},
			verdict: "error", kind: fault.Provider, code: runner.CodeProviderError, decision: "allowed", runs: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := 0
			provider := tc.provider
			if provider == nil {
				provider = func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write([]byte(`{"commentId":"c1"}`))
				}
			}
			f := apptest.New(t, apptest.Options{Customize: tc.customize, Provider: func(w http.ResponseWriter, r *http.Request) {
				runs++
				provider(w, r)
			}})
			gw := f.App.Gateway
			if tc.deps != nil {
				d := gw.Deps()
				tc.deps(&d)
				var err error
				if gw, err = gateway.New(d); err != nil {
					t.Fatal(err)
				}
			}
			ctx := context.Background()
			for range tc.repeat {
				if _, err := gw.Invoke(ctx, bot, tc.req); err != nil {
					t.Fatalf("call before the judged one: %v", err)
				}
			}
			runs = 0
			res, err := gw.Invoke(ctx, bot, tc.req)
			verdict, kind, code, auditID := "ran", fault.Internal, "", ""
			switch {
			case err != nil:
				var ge *fault.Error
				if !errors.As(err, &ge) {
					t.Fatalf("Invoke returned %T %v, want a *fault.Error", err, err)
				}
				verdict, kind, code, auditID = "error", ge.Kind, ge.Code, ge.AuditID
			case res.Denial != nil:
				verdict, code, auditID = "denied", res.Denial.Code, res.AuditID
				if res.Denial.Limited {
					verdict = "limited"
				}
			case res.Held != nil:
				verdict, code, auditID = "held", res.Held.Code, res.AuditID
				if res.Held.ApprovalID == "" || res.Held.AuditID != auditID {
					t.Fatalf("held %+v: want an approval id and the result's audit id", res.Held)
				}
			default:
				auditID = res.AuditID
			}
			if verdict != tc.verdict || (verdict == "error" && kind != tc.kind) || code != tc.code {
				t.Fatalf("answer %s %v %s, want %s %v %s", verdict, kind, code, tc.verdict, tc.kind, tc.code)
			}
			if (runs > 0) != tc.runs {
				t.Fatalf("provider called %d times; want called: %v", runs, tc.runs)
			}
			rec, err := f.App.Store.GetAudit(ctx, auditID)
			if err != nil {
				t.Fatalf("the answer's audit record %q: %v", auditID, err)
			}
			if rec.Decision != tc.decision || rec.Org != "default" || rec.SubjectRef != bot.Subject.Ref {
				t.Fatalf("audit record %s: decision %s, org %s, subject %s; want decision %s of the caller", rec.ID, rec.Decision, rec.Org, rec.SubjectRef, tc.decision)
			}
			// A call that ran has its outcome recorded, linked to the decision.
			outcome, err := f.App.Store.GetAudit(ctx, audit.OutcomeID(auditID))
			if tc.runs && (err != nil || outcome.ParentID != auditID) {
				t.Fatalf("outcome of %s: %+v %v", auditID, outcome.Outcome, err)
			}
			if !tc.runs && err == nil {
				t.Fatalf("a call that never ran has an outcome record %s", outcome.Outcome)
			}
		})
	}
}
