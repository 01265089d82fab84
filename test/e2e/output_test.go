package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestOutputValidation: a provider's output is checked against the capability's outputSchema;
// a violation is a typed 502 naming the JSON path, audited, and the output is not passed on.
func TestOutputValidation(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		var answer atomic.Value
		answer.Store(`{"ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88"}`)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprint(w, answer.Load().(string))
		}))
		t.Cleanup(srv.Close)
		g := startGateway(t, e.store(t))
		g.install(g.adminToken(), biomeDir(t, "ticketing", srv.URL))
		agent := g.token("--subject", "agent:support-bot", "--env", "project")
		invoke := func() response {
			return g.post("/v1/capabilities/invoke", agent, `{"ref":"ticket:find@1","input":{"customerEmail":"ada@example.com"}}`)
		}

		cases := []struct {
			name   string
			output string
			status int
			path   string
		}{
			{"valid", `{"ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88"}`, http.StatusOK, ""},
			{"undeclared property passes", `{"ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88","extra":1}`, http.StatusOK, ""},
			{"wrong type", `{"ticketId":12345}`, http.StatusBadGateway, "/ticketId"},
			{"format asserted", `{"ticketId":"secret-not-a-uuid"}`, http.StatusBadGateway, "/ticketId"},
			{"not an object", `["secret-value"]`, http.StatusBadGateway, ""},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				answer.Store(c.output)
				r := invoke()
				expect(t, r, c.status)
				if c.status == http.StatusOK {
					return
				}
				if str(r.Body, "code") != "INVALID_OUTPUT" || str(r.Body, "auditId") == "" {
					t.Fatalf("answer %s, want a typed INVALID_OUTPUT with an auditId", r.Raw)
				}
				if _, ok := r.Body["output"]; ok {
					t.Errorf("the output was passed on: %s", r.Raw)
				}
				if strings.Contains(string(r.Raw), "secret") {
					t.Errorf("the provider's output leaked into the answer: %s", r.Raw)
				}
				vs, _ := r.Body["violations"].([]any)
				if len(vs) == 0 || vs[0].(map[string]any)["path"] != c.path {
					t.Errorf("violations %v, want the first at %q", r.Body["violations"], c.path)
				}
				if c.path != "" && !strings.Contains(str(r.Body, "message"), c.path) {
					t.Errorf("message %q does not name %s", str(r.Body, "message"), c.path)
				}
				rec := g.get("/v1/audit/"+str(r.Body, "auditId"), agent)
				expect(t, rec, http.StatusOK)
				if str(rec.Body, "outcome") != "INVALID_OUTPUT" || str(rec.Body, "runner") != "http" {
					t.Errorf("audit %s", rec.Raw)
				}
			})
		}
	})
}
