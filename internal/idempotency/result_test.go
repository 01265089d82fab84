package idempotency

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/answer"
	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/explain"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/inputschema"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/ratelimit"
	"github.com/xemahq/xema/internal/store"
)

// TestResultRoundTrips: a kept result, decoded and answered by answer.Of, is byte for byte
// the answer the first call got (status, body, and the Retry-After a replay then drops),
// for each kind the funnel returns, and carries the first call's audit id.
func TestResultRoundTrips(t *testing.T) {
	denial := func(limited bool, retry int) *gateway.Denial {
		return &gateway.Denial{Denial: explain.Denial{
			Denial: audit.Denial{AuditID: "deny_1", Subject: audit.Subject{Kind: "agent", Ref: "agent:bot"}, Capability: "ticket:comment.add@1",
				Environment: "project", Decision: "denied", Reasons: json.RawMessage(`[{"code":"NO_GRANT","detail":{"n":12345678901234567890}}]`),
				Suggestions: json.RawMessage(`[]`)},
			Permissions: []explain.Permission{{BiomeID: "ticket", BiomeVersion: "1.0.0", Capability: "ticket:comment.add@1",
				Environments: []string{"project"}, Subjects: nil}},
			Next: []string{"ask for <ticket:comment.add@1> & wait"}},
			Code: ratelimit.CodeRateLimited, Message: "over the limit", RetryAfter: retry, Limited: limited}
	}
	provider := &fault.Error{Kind: fault.Provider, Code: "PROVIDER_ERROR", Message: "provider answered HTTP 500 \u2028 é",
		AuditID: "inv_9", ProviderStatus: 500, ProviderBody: `{"error":"<boom>"}`, ProviderBodyTruncated: true,
		Err: errors.New("never answered")}
	invalid := &fault.Error{Kind: fault.Invalid, Code: gateway.CodeInvalidInput, Message: "2 violations", AuditID: "inv_8",
		Violations: []inputschema.Violation{{Path: "/text", Message: "too long"}}, ViolationCount: 2}
	for name, tc := range map[string]struct {
		res     *gateway.Result
		err     error
		kind    string
		auditID string
	}{
		"ran": {res: &gateway.Result{Output: json.RawMessage(`{"html":"<b>&amp;</b>","n":12345678901234567890,"e":[]}`), AuditID: "inv_1",
			Obligations: []policy.Obligation{{Kind: "rate_limit", Requests: 10, Per: "1m"}}}, kind: kindRan, auditID: "inv_1"},
		"ran, no obligations, null output": {res: &gateway.Result{Output: json.RawMessage(`null`), AuditID: "inv_2"}, kind: kindRan, auditID: "inv_2"},
		"ran, empty obligations":           {res: &gateway.Result{Output: json.RawMessage(`1`), AuditID: "inv_3", Obligations: []policy.Obligation{}}, kind: kindRan, auditID: "inv_3"},
		"denied by the policy":             {res: &gateway.Result{AuditID: "deny_1", Denial: denial(false, 0)}, kind: kindDenied, auditID: "deny_1"},
		"denied by a limit":                {res: &gateway.Result{AuditID: "deny_1", Denial: denial(true, 17)}, kind: kindDenied, auditID: "deny_1"},
		"held": {res: &gateway.Result{AuditID: "inv_4", Held: &gateway.Held{Code: gateway.CodePendingApproval, Message: "wait",
			AuditID: "inv_4", Status: gateway.StatePendingApproval, ApprovalID: "apr_1"}}, kind: kindHeld, auditID: "inv_4"},
		"a provider error with its audit id":  {err: provider, kind: kindError, auditID: "inv_9"},
		"an error beside a result":            {res: &gateway.Result{Output: json.RawMessage(`1`), AuditID: "inv_5"}, err: fmt.Errorf("outcome: %w", invalid), kind: kindError, auditID: "inv_8"},
		"a rate limit error":                  {err: &fault.Error{Kind: fault.RateLimited, Code: "CAPACITY_EXCEEDED", Message: "busy", RetryAfter: 3}, kind: kindError},
		"an error that never said what it is": {err: errors.New("secret detail"), kind: kindError},
	} {
		t.Run(name, func(t *testing.T) {
			first, _ := answer.Of(tc.res, tc.err)
			r := resultOf(tc.res, tc.err)
			kept, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(kept, []byte("never answered")) || bytes.Contains(kept, []byte("secret detail")) {
				t.Fatalf("kept %s holds an error's unanswered text", kept)
			}
			back, err := parseResult(kept)
			if err != nil {
				t.Fatalf("parse %s: %v", kept, err)
			}
			again, _ := answer.Of(back.outcome())
			if again.Status != first.Status || !bytes.Equal(again.Body, first.Body) || again.RetryAfter != first.RetryAfter {
				t.Fatalf("kept %s answers %d %s (retry %d), want %d %s (retry %d)", kept, again.Status, again.Body, again.RetryAfter,
					first.Status, first.Body, first.RetryAfter)
			}
			if back.Kind != tc.kind || back.auditID() != tc.auditID || r.auditID() != tc.auditID {
				t.Fatalf("kept %s: kind %s, audit id %q; want %s, %q", kept, back.Kind, back.auditID(), tc.kind, tc.auditID)
			}
			stored, err := storedAnswer(storeRecord(kept))
			if err != nil || stored.Status != first.Status || !bytes.Equal(stored.Body, first.Body) || !stored.Replayed || stored.RetryAfter != 0 {
				t.Fatalf("replayed %+v, %v; want the first answer, replayed, without a Retry-After", stored, err)
			}
		})
	}
	limited, _ := answer.Of(&gateway.Result{Denial: denial(true, 17)}, nil)
	if limited.Status != http.StatusTooManyRequests || limited.RetryAfter != 17 {
		t.Fatalf("the limited denial answers %d retry %d: the case above tests no limit", limited.Status, limited.RetryAfter)
	}
}

// TestUnreadableResultFailsClosed: a kept result this release cannot take for one the
// funnel returned (damaged, of an unknown kind, missing its value or carrying another's) is
// an error naming it, never an answer made up of what decoded; a key without a result (a
// previous release's) answers its answer as sent.
func TestUnreadableResultFailsClosed(t *testing.T) {
	ran := `{"output":1,"auditId":"inv_1","obligations":null}`
	held := `{"code":"PENDING_APPROVAL","message":"m","auditId":"inv_1","status":"pending-approval","approvalId":"apr_1"}`
	for name, raw := range map[string]string{
		"not JSON":                    `{"kind":"ran","ran":` + ran[:10],
		"trailing data":               `{"kind":"ran","ran":` + ran + `}x`,
		"null":                        `null`,
		"an array":                    `[]`,
		"no kind":                     `{"ran":` + ran + `}`,
		"an unknown kind":             `{"kind":"maybe","ran":` + ran + `}`,
		"a kind of another type":      `{"kind":1,"ran":` + ran + `}`,
		"a kind in another case":      `{"kind":"RAN","ran":` + ran + `}`,
		"ran without its value":       `{"kind":"ran"}`,
		"ran with a null value":       `{"kind":"ran","ran":null}`,
		"ran without an audit id":     `{"kind":"ran","ran":{"output":{"token":"s3cret"}}}`,
		"ran with a held value too":   `{"kind":"ran","ran":` + ran + `,"held":` + held + `}`,
		"denied with a ran value":     `{"kind":"denied","ran":` + ran + `}`,
		"held with a ran value":       `{"kind":"held","ran":` + ran + `}`,
		"ran marked limited":          `{"kind":"ran","ran":` + ran + `,"limited":true}`,
		"ran with a fault kind":       `{"kind":"ran","ran":` + ran + `,"fault":"invalid"}`,
		"an error without its kind":   `{"kind":"error","error":{"code":"X","message":"m"}}`,
		"an error of an unknown kind": `{"kind":"error","error":{"code":"X","message":"m"},"fault":"kind(99)"}`,
		"an error without its value":  `{"kind":"error","fault":"internal"}`,
		"a value of the wrong type":   `{"kind":"ran","ran":"<b>hi</b>"}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := parseResult([]byte(raw)); !errors.Is(err, errUnreadable) {
				t.Fatalf("parse %s: %v, want errUnreadable", raw, err)
			}
			rec := storeRecord([]byte(raw))
			rec.AuditID = "inv_1"
			ans, err := storedAnswer(rec)
			var fe *fault.Error
			if !errors.As(err, &fe) || fe.Code != CodeResultUnreadable || fe.Kind != fault.Internal || fe.AuditID != "inv_1" ||
				answer.Status(fe.Kind) != http.StatusInternalServerError || ans.Status != 0 || ans.Body != nil {
				t.Fatalf("replay of %s = %+v, %v; want %s (500) naming the audit record, and no answer", raw, ans, err, CodeResultUnreadable)
			}
			if strings.Contains(fe.Message, "s3cret") || strings.Contains(fe.Message, "<b>") {
				t.Fatalf("the error tells the stored value: %s", fe.Message)
			}
		})
	}
	legacy := storeRecord(nil)
	legacy.Status, legacy.Body = http.StatusForbidden, json.RawMessage(`{"code":"DENIED", "auditId":"deny_1"}`)
	for _, empty := range []json.RawMessage{nil, {}} {
		legacy.Result = empty
		ans, err := storedAnswer(legacy)
		if err != nil || ans.Status != http.StatusForbidden || !bytes.Equal(ans.Body, legacy.Body) || !ans.Replayed {
			t.Fatalf("a key without a result = %+v, %v; want its answer as sent, byte for byte", ans, err)
		}
	}
}

// storeRecord is a done key keeping result, with an answer as sent unlike any answer: a
// replay made of the result never shows it.
func storeRecord(result json.RawMessage) store.IdempotencyRecord {
	return store.IdempotencyRecord{Org: "acme", Subject: "agent:bot", Key: "k", State: store.IdempotencyDone, Result: result,
		Status: http.StatusTeapot, Body: json.RawMessage(`{"legacy":true}`), CreatedAt: time.Now(), ExpiresAt: time.Now().Add(TTL)}
}
