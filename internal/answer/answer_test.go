package answer

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
)

// TestStatus: every kind has its own status, none a 200 or a 202 (which say a call ran or
// is held), and an unknown kind is a 500.
func TestStatus(t *testing.T) {
	want := map[fault.Kind]int{
		fault.Internal: 500, fault.Invalid: 400, fault.Unauthenticated: 401, fault.Denied: 403, fault.NotFound: 404,
		fault.Conflict: 409, fault.Gone: 410, fault.TooLarge: 413, fault.UnsupportedMedia: 415, fault.Unprocessable: 422,
		fault.RateLimited: 429, fault.NotImplemented: 501, fault.Provider: 502, fault.Unavailable: 503, fault.Timeout: 504,
	}
	for k := fault.Internal; k <= fault.Timeout; k++ {
		if got := Status(k); got != want[k] {
			t.Errorf("Status(%s) = %d, want %d", k, got, want[k])
		}
	}
	if got := Status(fault.Kind(99)); got != http.StatusInternalServerError {
		t.Errorf("Status(unknown) = %d, want 500", got)
	}
}

// TestOf: what the funnel returned becomes one status, body and code: an error first (even
// beside a result), then a denial (403, or 429 with Retry-After when a limit refused it), a
// held call (202) and a call that ran (200, no code).
func TestOf(t *testing.T) {
	ran := &gateway.Result{Output: json.RawMessage(`{"ok":true}`), AuditID: "aud_1"}
	for _, tc := range []struct {
		name       string
		res        *gateway.Result
		err        error
		status     int
		code, body string
		retry      int
	}{
		{"ran", ran, nil, 200, "", `{"output":{"ok":true},"auditId":"aud_1","obligations":null}`, 0},
		{"denied", &gateway.Result{Denial: &gateway.Denial{Code: "MISSING_GRANT", Message: "no grant"}}, nil, 403, "MISSING_GRANT", "", 0},
		{"rate limited", &gateway.Result{Denial: &gateway.Denial{Code: "RATE_LIMITED", Message: "slow down", RetryAfter: 7, Limited: true}},
			nil, 429, "RATE_LIMITED", "", 7},
		{"held", &gateway.Result{Held: &gateway.Held{Code: "PENDING_APPROVAL", AuditID: "aud_2", ApprovalID: "apr_1", Status: "pending-approval"}},
			nil, 202, "PENDING_APPROVAL", `{"code":"PENDING_APPROVAL","message":"","auditId":"aud_2","status":"pending-approval","approvalId":"apr_1"}`, 0},
		{"error beside a result", ran, fault.New(fault.Unavailable, "OUTCOME_NOT_RECORDED", "ran, not recorded"), 503, "OUTCOME_NOT_RECORDED",
			`{"code":"OUTCOME_NOT_RECORDED","message":"ran, not recorded"}`, 0},
		{"plain error", nil, errors.New("secret detail"), 500, "INTERNAL", `{"code":"INTERNAL","message":"internal error"}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, code := Of(tc.res, tc.err)
			if a.Status != tc.status || code != tc.code || a.RetryAfter != tc.retry {
				t.Fatalf("Of = %d %q retry %d, want %d %q retry %d", a.Status, code, a.RetryAfter, tc.status, tc.code, tc.retry)
			}
			if tc.body != "" && string(a.Body) != tc.body {
				t.Fatalf("body %s, want %s", a.Body, tc.body)
			}
			if a.Ran() != (tc.status == 200) || a.Held() != (tc.status == 202) {
				t.Fatalf("Ran %v Held %v for status %d", a.Ran(), a.Held(), a.Status)
			}
		})
	}
}

// TestErrorCarriesRetryAfter: a refusal a retry may pass keeps its Retry-After.
func TestErrorCarriesRetryAfter(t *testing.T) {
	e := fault.New(fault.Unavailable, "PROVIDER_BUSY", "busy")
	e.RetryAfter = 3
	if a := Error(e); a.Status != 503 || a.RetryAfter != 3 {
		t.Fatalf("Error = %+v", a)
	}
}
