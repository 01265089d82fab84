package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/gateway"
)

const commentRef = "ticket:comment.add@1"

var comment = json.RawMessage(`{"ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88","text":"hi"}`)

// TestFunnelExits has one row per way out of the funnel: each answer's status and code, the
// audit record it names (decision), and whether the provider was called.
func TestFunnelExits(t *testing.T) {
	bot := apptest.Exec("agent:support-bot", "project", "")
	failing := func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":"down"}`, http.StatusInternalServerError)
	}
	for _, tc := range []struct {
		name      string
		customize map[string]any
		provider  http.HandlerFunc
		prepare   func(f *apptest.Fixture)
		req       gateway.Request
		repeat    int // calls made before the one judged
		status    int
		code      string
		decision  string
		runs      bool
	}{
		{name: "200 ran", req: gateway.Request{Ref: commentRef, Input: comment}, status: http.StatusOK, decision: "allowed", runs: true},
		{name: "404 unknown ref", req: gateway.Request{Ref: "ticket:nothing@1", Input: comment}, status: http.StatusNotFound,
			code: gateway.CodeUnknownCapability, decision: "unknown-capability"},
		{name: "403 denied", customize: map[string]any{commentRef: map[string]any{"subjects": []string{"agent:other"}}},
			req: gateway.Request{Ref: commentRef, Input: comment}, status: http.StatusForbidden, code: gateway.CodeDenied, decision: "denied"},
		{name: "400 invalid input", req: gateway.Request{Ref: commentRef, Input: json.RawMessage(`{"ticketId":"x"}`)},
			status: http.StatusBadRequest, code: gateway.CodeInvalidInput, decision: "invalid-input"},
		{name: "429 over the rate limit", customize: map[string]any{commentRef: map[string]any{"rateLimit": map[string]any{"requests": 1, "per": "1m"}}},
			repeat: 1, req: gateway.Request{Ref: commentRef, Input: comment}, status: http.StatusTooManyRequests, code: gateway.CodeRateLimited, decision: "denied"},
		{name: "202 held for approval", customize: map[string]any{commentRef: map[string]any{"requiresApproval": true}},
			req: gateway.Request{Ref: commentRef, Input: comment}, status: http.StatusAccepted, code: gateway.CodePendingApproval, decision: "pending-approval"},
		{name: "503 no approval queue", customize: map[string]any{commentRef: map[string]any{"requiresApproval": true}},
			prepare: func(f *apptest.Fixture) { f.App.Gateway.Approvals = nil },
			req:     gateway.Request{Ref: commentRef, Input: comment}, status: http.StatusServiceUnavailable, code: gateway.CodeApprovalUnavailable, decision: "error"},
		{name: "502 provider failed", provider: failing, req: gateway.Request{Ref: commentRef, Input: comment},
			status: http.StatusBadGateway, decision: "allowed", runs: true},
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
			if tc.prepare != nil {
				tc.prepare(f)
			}
			ctx := context.Background()
			for range tc.repeat {
				if _, err := f.App.Gateway.Invoke(ctx, bot, tc.req); err != nil {
					t.Fatalf("call before the judged one: %v", err)
				}
			}
			runs = 0
			res, err := f.App.Gateway.Invoke(ctx, bot, tc.req)
			status, code, auditID := http.StatusOK, "", ""
			if err != nil {
				var ge *gateway.Error
				if !errors.As(err, &ge) {
					t.Fatalf("Invoke returned %T %v, want a *gateway.Error", err, err)
				}
				status, code, auditID = ge.Status, ge.Code, ge.AuditID
			} else {
				auditID = res.AuditID
			}
			if status != tc.status || (tc.code != "" && code != tc.code) {
				t.Fatalf("answer %d %s, want %d %s", status, code, tc.status, tc.code)
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
