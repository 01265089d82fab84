package e2e

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestEgressRefusedAtSubmit: an invocation URL, a binding base URL or an MCP server URL that
// is a refused address, in any notation, is a 400 naming its JSON pointer, and nothing is
// stored; plain http to a non-loopback host is refused where a token or credential would
// travel. Under the development issuer loopback is allowed (the providers here are on it).
func TestEgressRefusedAtSubmit(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		admin := g.adminToken()
		t.Run("invocation url", func(t *testing.T) {
			for _, u := range []string{
				"http://169.254.169.254", "http://2852039166", "http://0251.0376.0251.0376", "http://0xa9fea9fe",
				"http://[::ffff:169.254.169.254]", "http://[fd00:ec2::254]", "http://100.100.100.200", "http://169.254.169.254.",
				"http://[fe80::1%25eth0]", "http://0.0.0.0:8080", "http://10.0.0.1", "http://[fc00::1]",
				"http://provider.example.com", // plain http to a non-loopback host would carry the bearer token
			} {
				r := g.post("/v1/biomes", admin, submission(t, biomeDir(t, "ticketing", u)))
				if r.Status != http.StatusBadRequest || str(r.Body, "code") != "INVALID_MANIFEST" || !hasPath(r, "/contributions/0/invocation/url") {
					t.Errorf("%s: %d %.400s; want 400 naming /contributions/0/invocation/url", u, r.Status, r.Raw)
				}
			}
			// Nothing was stored: the same version with an https URL is accepted (a stored
			// version with other content would be a 409).
			r := g.post("/v1/biomes", admin, submission(t, biomeDir(t, "ticketing", "https://provider.example.com")))
			expect(t, r, http.StatusCreated)
		})
		t.Run("binding baseUrl", func(t *testing.T) {
			c := g.post("/v1/credentials", admin, map[string]any{"name": "gl", "provider": "gitlab", "secret": "glpat-x"})
			expect(t, c, http.StatusCreated)
			for _, u := range []string{"http://169.254.169.254", "https://[::ffff:a9fe:a9fe]", "https://2852039166", "http://gitlab.example.com"} {
				r := g.post("/v1/bindings", admin, map[string]any{"refPattern": "connector:scm.*", "provider": "gitlab", "baseUrl": u,
					"credentialId": str(c.Body, "id"), "config": map[string]any{"repository": "acme/app"}})
				if r.Status != http.StatusBadRequest || str(r.Body, "code") != "INVALID_BINDING" || !hasPath(r, "/baseUrl") {
					t.Errorf("baseUrl %s: %d %s; want 400 naming /baseUrl", u, r.Status, r.Raw)
				}
			}
			list := g.get("/v1/bindings", admin)
			if strings.Contains(string(list.Raw), "bnd_") {
				t.Errorf("a refused binding was stored: %s", list.Raw)
			}
		})
		t.Run("mcp server url", func(t *testing.T) {
			for _, u := range []string{"http://169.254.169.254/mcp", "http://[::ffff:169.254.169.254]/mcp", "http://017700000001.0/mcp"} {
				r := g.post("/v1/mcp-servers", admin, map[string]any{"providerId": "meta", "transport": "streamable-http", "url": u})
				if r.Status != http.StatusBadRequest || str(r.Body, "code") != "INVALID_MCP_SERVER" || !hasPath(r, "/url") {
					t.Errorf("url %s: %d %s; want 400 naming /url", u, r.Status, r.Raw)
				}
			}
			r := g.post("/v1/mcp-servers", admin, map[string]any{"providerId": "meta", "transport": "streamable-http",
				"url": "http://mcp.example.com/mcp", "auth": map[string]any{"kind": "service-token"}})
			if r.Status != http.StatusBadRequest || !hasPath(r, "/url") {
				t.Errorf("the service token over plain http: %d %s", r.Status, r.Raw)
			}
		})
	})
}

// TestEgressRedirectNotFollowed: a provider answering 307 to another server gets a typed 502
// PROVIDER_REDIRECT; the other server receives nothing (neither the body nor the bearer).
func TestEgressRedirectNotFollowed(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		agent := g.token("--subject", "agent:support-bot", "--env", "project")
		var second atomic.Int32
		target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			second.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ticketId":"stolen"}`))
		}))
		t.Cleanup(target.Close)
		redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+r.URL.Path, http.StatusTemporaryRedirect)
		}))
		t.Cleanup(redirector.Close)
		g.install(g.adminToken(), biomeDir(t, "ticketing", redirector.URL))

		r := g.post("/v1/capabilities/invoke", agent, `{"ref":"ticket:create@1","input":`+validTicket+`}}`)
		if r.Status != http.StatusBadGateway || str(r.Body, "code") != "PROVIDER_REDIRECT" || str(r.Body, "auditId") == "" {
			t.Fatalf("redirect: %d %s; want a typed 502 PROVIDER_REDIRECT", r.Status, r.Raw)
		}
		if n := second.Load(); n != 0 {
			t.Fatalf("the redirect target got %d request(s)", n)
		}
		rec := g.get("/v1/audit/"+str(r.Body, "auditId"), g.adminToken())
		expect(t, rec, http.StatusOK)
	})
}
