package e2e

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/identity"
)

// TestBadInput sends what a careless or hostile client sends. Each answer is a typed JSON
// error, and none of these calls reaches the provider or is recorded as allowed.
func TestBadInput(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		t.Parallel() // the engines overlap their wait for the expired token
		g := startGateway(t, e.store(t))
		prov := newProvider(t)
		g.install(g.adminToken(), biomeDir(t, "ticketing", prov.URL))
		agent := g.token("--subject", "agent:support-bot", "--env", "project")
		expired := g.token("--subject", "agent:support-bot", "--env", "project", "--ttl", "1s")
		expiresAt := time.Now().Add(time.Second + identity.DefaultLeeway)
		admin := g.adminToken()
		forged := agent[:len(agent)-4] + "AAAA"
		otherIssuer := startGateway(t, "").token("--subject", "agent:support-bot", "--env", "project")
		const invoke = "/v1/capabilities/invoke"
		valid := `{"ref":"ticket:find@1","input":{"customerEmail":"ada@example.com"}}`
		big := `{"ref":"ticket:find@1","input":{"customerEmail":"` + strings.Repeat("a", 1<<20) + `@example.com"}}`

		send := func(path, token, contentType, body string) response {
			req, _ := http.NewRequest(http.MethodPost, g.URL+path, strings.NewReader(body))
			if contentType != "" {
				req.Header.Set("Content-Type", contentType)
			}
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			return g.do(req)
		}
		tests := []struct {
			name, path, token, contentType, body string
			status                               int
			code                                 string
		}{
			{"malformed JSON", invoke, agent, "application/json", `{"ref":"ticket:find@1","input":{`, 400, "MALFORMED_JSON"},
			{"two JSON values", invoke, agent, "application/json", valid + valid, 400, "MALFORMED_JSON"},
			{"empty body", invoke, agent, "application/json", ``, 400, "MALFORMED_JSON"},
			{"ref not a string", invoke, agent, "application/json", `{"ref":7,"input":{}}`, 400, "MALFORMED_JSON"},
			{"missing input", invoke, agent, "application/json", `{"ref":"ticket:find@1"}`, 400, "INVALID_REQUEST"},
			{"unknown field in invoke", invoke, agent, "application/json", `{"ref":"ticket:find@1","input":{},"as":"admin"}`, 400, "MALFORMED_JSON"},
			{"text/plain", invoke, agent, "text/plain", valid, 415, "UNSUPPORTED_MEDIA_TYPE"},
			{"form", invoke, agent, "application/x-www-form-urlencoded", valid, 415, "UNSUPPORTED_MEDIA_TYPE"},
			{"no content type", invoke, agent, "", valid, 415, "UNSUPPORTED_MEDIA_TYPE"},
			{"body over 1 MiB", invoke, agent, "application/json", big, 413, "BODY_TOO_LARGE"},
			{"missing token", invoke, "", "application/json", valid, 401, "UNAUTHENTICATED"},
			{"forged signature", invoke, forged, "application/json", valid, 401, "UNAUTHENTICATED"},
			{"another issuer's token", invoke, otherIssuer, "application/json", valid, 401, "UNAUTHENTICATED"},
			{"garbage token", invoke, "not.a.jwt", "application/json", valid, 401, "UNAUTHENTICATED"},
			{"unknown field in search", "/v1/capabilities/search", agent, "application/json", `{"query":"x","scope":"all"}`, 400, "MALFORMED_JSON"},
			{"unknown field in describe", "/v1/capabilities/describe", agent, "application/json", `{"refs":["kb:page.read@1"],"verbose":true}`, 400, "MALFORMED_JSON"},
			{"unknown field in plan", "/v1/capabilities/plan", agent, "application/json", `{"goalCapabilityRef":"kb:page.read@1","from":[]}`, 400, "MALFORMED_JSON"},
			{"unknown field in preflight", "/v1/capabilities/preflight", agent, "application/json", `{"ref":"kb:page.read@1","force":true}`, 400, "MALFORMED_JSON"},
			{"unknown field in explain", "/v1/capabilities/explain", agent, "application/json", `{"capabilityRef":"kb:page.read@1","denialCode":"MISSING_GRANT","why":1}`, 400, "MALFORMED_JSON"},
			{"search limit out of range", "/v1/capabilities/search", agent, "application/json", `{"limit":1000}`, 400, "INVALID_ARGUMENT"},
			{"describe with no refs", "/v1/capabilities/describe", agent, "application/json", `{"refs":[]}`, 400, "INVALID_ARGUMENT"},
			{"unknown ref", invoke, agent, "application/json", `{"ref":"ticket:burn@1","input":{}}`, 404, "UNKNOWN_CAPABILITY"},
			{"ref that does not parse", invoke, agent, "application/json", `{"ref":"../../etc/passwd","input":{}}`, 404, "UNKNOWN_CAPABILITY"},
			{"input not an object", invoke, agent, "application/json", `{"ref":"ticket:find@1","input":"ada@example.com"}`, 400, "INVALID_INPUT"},
			{"unknown field in a grant", "/v1/grants", admin, "application/json", `{"biomeId":"ticketing","version":"1.0.0","digestHash":"x","approve":true}`, 400, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := send(tt.path, tt.token, tt.contentType, tt.body)
				if r.Status != tt.status {
					t.Fatalf("status %d, want %d; body %.300s", r.Status, tt.status, r.Raw)
				}
				if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
					t.Errorf("Content-Type %q", ct)
				}
				if str(r.Body, "code") == "" || str(r.Body, "message") == "" || (tt.code != "" && str(r.Body, "code") != tt.code) {
					t.Errorf("body %.300s, want a typed error with code %s", r.Raw, tt.code)
				}
				if bytes.Contains(r.Raw, []byte(agent)) || bytes.Contains(r.Raw, []byte("aaaaaaaaaa")) {
					t.Errorf("the answer echoes the token or the input: %.300s", r.Raw)
				}
				if id := str(r.Body, "auditId"); id != "" {
					rec := g.get("/v1/audit/"+id, admin)
					expect(t, rec, http.StatusOK)
					if d := str(rec.Body, "decision"); d == "allowed" {
						t.Errorf("recorded as %s: %s", d, rec.Raw)
					}
				}
			})
		}
		if n := prov.count(); n != 0 {
			t.Errorf("bad requests reached the provider %d times", n)
		}
		// The limit is on the body, not the input: a body just under 1 MiB is read and judged.
		under := `{"ref":"ticket:find@1","input":{"customerEmail":"` + strings.Repeat("a", 1<<20-200) + `@example.com"}}`
		if r := send(invoke, agent, "application/json; charset=utf-8", under); r.Status == http.StatusRequestEntityTooLarge || r.Status == http.StatusUnsupportedMediaType {
			t.Errorf("a body under the limit: %d %.200s", r.Status, r.Raw)
		}
		// And after all that, a good call still works.
		expect(t, send(invoke, agent, "application/json", valid), http.StatusOK)

		// The verifier grants clocks identity.DefaultLeeway of drift past exp, and no more.
		time.Sleep(time.Until(expiresAt) + time.Second)
		before := prov.count()
		r := send(invoke, expired, "application/json", valid)
		if r.Status != http.StatusUnauthorized || str(r.Body, "code") != "UNAUTHENTICATED" {
			t.Errorf("expired token: %d %.300s", r.Status, r.Raw)
		}
		if prov.count() != before {
			t.Error("an expired token reached the provider")
		}
	})
}
