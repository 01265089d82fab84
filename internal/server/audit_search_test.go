package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/server"
	"github.com/xemahq/xema/internal/store"
)

// auditSearchServer serves the fixture's gateway with the given callers, the log holding one
// record of the default org (user:alice's) and one of no org.
func auditSearchServer(t *testing.T, callers tokens) *httptest.Server {
	t.Helper()
	f := apptest.New(t, apptest.Options{})
	ctx := context.Background()
	for _, r := range []store.AuditRecord{
		{ID: "aud_alice", Org: identity.DefaultOrg, Time: time.Now(), SubjectKind: "user", SubjectRef: "user:alice", Ref: "kb:page.read@1", Decision: "allowed"},
		{ID: "aud_noorg", Org: "", Time: time.Now(), Ref: "/v1/grants", Decision: "unauthenticated"},
	} {
		if err := f.App.Store.AppendAudit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer((&server.Server{Gateway: f.App.Gateway, Tools: f.App.Tools, Idempotency: f.App.Idempotency, Audit: f.App.Store, Approvals: f.App.Approvals, OperatorOrg: identity.DefaultOrg,
		Ready: f.App.Ready, Mounts: map[string]http.Handler{}, Auth: callers}).Handler())
	t.Cleanup(srv.Close)
	return srv
}

func getAudit(t *testing.T, srv *httptest.Server, token, query string) (int, map[string]any, string) {
	t.Helper()
	return callJSON(t, http.MethodGet, srv.URL+"/v1/audit?"+query, token)
}

// callJSON sends a bodiless request with the bearer token and returns the status, the JSON
// answer decoded and its raw text; an answer that is not JSON fails the test.
func callJSON(t *testing.T, method, url, token string) (int, map[string]any, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("%s %s: body is not JSON: %v: %s", method, url, err, raw)
	}
	return resp.StatusCode, body, string(raw)
}

// TestAuditSearchRefusesTextTheStoreCannotHold: a NUL or bytes that are not UTF-8 in a
// parameter are the caller's 400, not a store error (PostgreSQL refuses them).
func TestAuditSearchRefusesTextTheStoreCannotHold(t *testing.T) {
	srv := auditSearchServer(t, tokens{"admin": apptest.Exec("user:admin", "org", "org_admin")})
	for _, q := range []string{"ref=a%00b", "subject=%FF", "reason=%C3%28", "parent=%00"} {
		status, body, raw := getAudit(t, srv, "admin", q)
		name, _, _ := strings.Cut(q, "=")
		if status != http.StatusBadRequest || body["code"] != "INVALID_REQUEST" || !strings.Contains(raw, name) {
			t.Errorf("?%s: %d %s, want 400 INVALID_REQUEST naming %s", q, status, raw, name)
		}
	}
	if status, _, raw := getAudit(t, srv, "admin", "ref=kb:page.read@1"); status != http.StatusOK || !strings.Contains(raw, "aud_alice") {
		t.Errorf("a plain query: %d %s", status, raw)
	}
}

// TestAuditSearchFailsClosed: a caller of no org reads no record of no org (those are the
// operator's administrators', as GET /v1/audit/{id} has it), and a caller who is no
// administrator and has no subject ref reads nobody's records.
func TestAuditSearchFailsClosed(t *testing.T) {
	noOrg := apptest.Exec("user:admin", "org", "org_admin")
	noOrg.Org = ""
	noSubject := apptest.Exec("user:x", "org", "")
	noSubject.Subject.Ref = ""
	srv := auditSearchServer(t, tokens{"admin": apptest.Exec("user:admin", "org", "org_admin"), "no-org": noOrg, "no-subject": noSubject})
	if status, _, raw := getAudit(t, srv, "admin", "limit=100"); status != http.StatusOK || !strings.Contains(raw, "aud_alice") || strings.Contains(raw, "aud_noorg") {
		t.Fatalf("the org's admin: %d %s, want aud_alice only", status, raw)
	}
	for _, token := range []string{"no-org", "no-subject"} {
		status, body, raw := getAudit(t, srv, token, "limit=100")
		if status != http.StatusOK || len(body["records"].([]any)) != 0 {
			t.Errorf("%s: %d %s, want no record", token, status, raw)
		}
	}
}
