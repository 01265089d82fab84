package e2e

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// jwtClaims decodes a JWT's payload without verifying it (the test only reads its claims).
func jwtClaims(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %.40s", tok)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestOutboundTokenNotAcceptedInbound: the token a provider receives is scoped to that
// provider (audience xema-provider:<its origin>, marked outbound), reused across calls, and
// replayed at the gateway it is a 401 on every route, the bundle included. The bundle is
// served only to the --bundle-reader subject: org admins, agents and other service subjects
// get 403.
func TestOutboundTokenNotAcceptedInbound(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t), "--bundle-reader", "service:opa-sidecar")
		admin := g.adminToken()
		agent := g.token("--subject", "agent:support-bot", "--env", "project")
		prov := newProvider(t)
		g.install(admin, biomeDir(t, "ticketing", prov.URL))
		call := `{"ref":"ticket:create@1","input":` + validTicket + `}}`
		expect(t, g.post("/v1/capabilities/invoke", agent, call), http.StatusOK)
		bearer := strings.TrimPrefix(prov.last(t).Header.Get("Authorization"), "Bearer ")
		if bearer == "" {
			t.Fatal("the provider got no bearer token")
		}
		claims := jwtClaims(t, bearer)
		if claims["aud"] != "xema-provider:"+prov.URL || claims["xema_use"] != "outbound" || claims["sub"] != "service:xema-gateway" {
			t.Fatalf("outbound token claims: %v", claims)
		}
		expect(t, g.post("/v1/capabilities/invoke", agent, call), http.StatusOK)
		if again := strings.TrimPrefix(prov.last(t).Header.Get("Authorization"), "Bearer "); again != bearer {
			t.Error("a second call minted a new outbound token (not cached per audience)")
		}

		t.Run("replayed by the provider", func(t *testing.T) {
			for _, r := range []response{
				g.get("/v1/bundles/xema.tar.gz", bearer),
				g.post("/v1/capabilities/search", bearer, map[string]any{"query": "ticket"}),
				g.post("/v1/capabilities/invoke", bearer, call),
				g.get("/v1/mcp-servers", bearer),
			} {
				if r.Status != http.StatusUnauthorized {
					t.Errorf("replayed outbound token: %d %.300s; want 401", r.Status, r.Raw)
				}
			}
		})
		t.Run("bundle readers only", func(t *testing.T) {
			for name, tok := range map[string]string{
				"org admin":            admin,
				"org owner":            g.token("--subject", "user:olga", "--org-role", "org_owner", "--env", "org"),
				"agent with org_admin": g.token("--subject", "agent:support-bot", "--org-role", "org_admin", "--env", "org"),
				"another service":      g.token("--subject", "service:billing", "--env", "service"),
				"the gateway's name":   g.token("--subject", "service:xema-gateway", "--env", "service"),
			} {
				r := g.get("/v1/bundles/xema.tar.gz", tok)
				if r.Status != http.StatusForbidden || str(r.Body, "code") != "DENIED" || str(r.Body, "message") == "" {
					t.Errorf("%s: %d %.200s; want a typed 403", name, r.Status, r.Raw)
				}
			}
			r := g.get("/v1/bundles/xema.tar.gz", g.token("--subject", "service:opa-sidecar", "--env", "service"))
			if r.Status != http.StatusOK || r.Header.Get("Content-Type") != "application/gzip" {
				t.Errorf("the bundle reader: %d %.200s", r.Status, r.Raw)
			}
		})
	})
}
