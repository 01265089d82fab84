package server_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/server"
)

// tokens stands in for the verifier: the edge's mapping is under test, not token checks
// (those have their own tests and the e2e suite).
type tokens map[string]identity.ExecContext

func (t tokens) Authenticate(r *http.Request) (identity.ExecContext, error) {
	ec, ok := t[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	if !ok {
		return identity.ExecContext{}, &identity.TokenError{Reason: identity.ReasonMissingToken}
	}
	return ec, nil
}

// TestInvokeAnswersAtTheEdge: each exit of the funnel becomes its HTTP status and body once,
// at the edge.
func TestInvokeAnswersAtTheEdge(t *testing.T) {
	f := apptest.New(t, apptest.Options{Customize: map[string]any{"ticket:comment.add@1": map[string]any{
		"requiresApproval": true, "environments": []string{"project"}}}})
	srv := httptest.NewServer((&server.Server{Gateway: f.App.Gateway, Tools: f.App.Tools, Idempotency: f.App.Idempotency, Audit: f.App.Store, Approvals: f.App.Approvals, OperatorOrg: identity.DefaultOrg,
		Ready: f.App.Ready, Mounts: map[string]http.Handler{}, Auth: tokens{
			"bot":    apptest.Exec("agent:support-bot", "project", ""),
			"public": apptest.Exec("agent:support-bot", "public-session", ""),
		}}).Handler())
	defer srv.Close()
	held := `{"ref":"ticket:comment.add@1","input":{"ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88","text":"hi"}}`
	for _, tc := range []struct {
		name, token, body string
		status            int
		code              string
		has               []string
	}{
		{"202 held", "bot", held, http.StatusAccepted, "PENDING_APPROVAL", []string{`"status":"pending-approval"`, `"approvalId":"apr_`}},
		{"403 structured denial", "public", held, http.StatusForbidden, "DENIED", []string{`"reasons":[`, `"capability":"ticket:comment.add@1"`, `"environment":"public-session"`}},
		{"404 unknown", "bot", `{"ref":"ticket:nothing@1","input":{}}`, http.StatusNotFound, "UNKNOWN_CAPABILITY", nil},
		{"400 invalid input names the path", "bot", `{"ref":"ticket:comment.add@1","input":{"ticketId":"nope"}}`, http.StatusBadRequest, "INVALID_INPUT", []string{`"path":"/ticketId"`}},
		{"400 not JSON", "bot", `{"ref":`, http.StatusBadRequest, "", nil},
		{"401 without a token", "", held, http.StatusUnauthorized, "UNAUTHENTICATED", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/capabilities/invoke", bytes.NewBufferString(tc.body))
			req.Header.Set("Content-Type", "application/json")
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var raw bytes.Buffer
			if _, err := raw.ReadFrom(resp.Body); err != nil {
				t.Fatal(err)
			}
			var body map[string]any
			if err := json.Unmarshal(raw.Bytes(), &body); err != nil {
				t.Fatalf("body is not JSON: %v: %s", err, raw.String())
			}
			if resp.StatusCode != tc.status || (tc.code != "" && body["code"] != tc.code) {
				t.Fatalf("%d %s, want %d %s", resp.StatusCode, raw.String(), tc.status, tc.code)
			}
			if body["code"] == nil || body["message"] == nil {
				t.Errorf("error body without code and message: %s", raw.String())
			}
			for _, h := range tc.has {
				if !strings.Contains(raw.String(), h) {
					t.Errorf("body %s lacks %s", raw.String(), h)
				}
			}
			if strings.Contains(raw.String(), "goroutine") || strings.Contains(raw.String(), ".go:") {
				t.Errorf("body leaks internals: %s", raw.String())
			}
			if tc.status != http.StatusBadRequest || tc.code != "" {
				if id, _ := body["auditId"].(string); id == "" {
					t.Errorf("no auditId in %s", raw.String())
				}
			}
		})
	}
}

// TestRefusalsOnEveryRoute: a call over its rate limit is 429 with Retry-After (header and
// body agree), and a REST route backed by a kernel capability (GET /v1/approvals, org admins
// only) answers a policy refusal with the same structured 403 as /v1/capabilities/invoke.
func TestRefusalsOnEveryRoute(t *testing.T) {
	f := apptest.New(t, apptest.Options{Customize: map[string]any{"ticket:comment.add@1": map[string]any{
		"rateLimit": map[string]any{"requests": 1, "per": "1m"}}}})
	srv := httptest.NewServer((&server.Server{Gateway: f.App.Gateway, Tools: f.App.Tools, Idempotency: f.App.Idempotency, Audit: f.App.Store, Approvals: f.App.Approvals, OperatorOrg: identity.DefaultOrg,
		Ready: f.App.Ready, Mounts: map[string]http.Handler{}, Auth: tokens{"bot": apptest.Exec("agent:support-bot", "project", "")}}).Handler())
	defer srv.Close()
	call := func(method, path, body string) (*http.Response, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer bot")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return resp, out
	}
	invoke := `{"ref":"ticket:comment.add@1","input":{"ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88","text":"hi"}}`
	if resp, body := call(http.MethodPost, "/v1/capabilities/invoke", invoke); resp.StatusCode != http.StatusOK {
		t.Fatalf("first call: %d %v", resp.StatusCode, body)
	}
	resp, body := call(http.MethodPost, "/v1/capabilities/invoke", invoke)
	retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || body["code"] != "RATE_LIMITED" || retry < 1 ||
		body["retryAfter"] != float64(retry) || body["reasons"] == nil || body["auditId"] == nil {
		t.Fatalf("second call: %d Retry-After %q %v; want 429 RATE_LIMITED with Retry-After = retryAfter, reasons and an auditId",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	resp, body = call(http.MethodGet, "/v1/approvals", "")
	if resp.StatusCode != http.StatusForbidden || body["code"] != "DENIED" || body["reasons"] == nil || body["auditId"] == nil ||
		resp.Header.Get("X-Xema-Audit-Id") != "" {
		t.Fatalf("GET /v1/approvals by an agent: %d %v; want the structured 403", resp.StatusCode, body)
	}
}
