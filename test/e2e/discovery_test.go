package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestMCPAuthorizationDiscovery: 401s of /mcp carry the RFC 9728 challenge, and the metadata it
// names describes the resource and how to present a token.
func TestMCPAuthorizationDiscovery(t *testing.T) {
	g := startGateway(t, "")
	wantMeta := g.URL + "/.well-known/oauth-protected-resource"
	for _, tc := range []struct {
		name, path, auth string
		invalid          bool
	}{
		{"mcp without a token", "/mcp", "", false},
		{"mcp with a forged token", "/mcp", "Bearer not-a-jwt", true},
		{"http api without a token", "/v1/capabilities/search", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, g.URL+tc.path, strings.NewReader(`{}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			r := g.do(req)
			expect(t, r, http.StatusUnauthorized)
			wa := r.Header.Get("WWW-Authenticate")
			if !strings.HasPrefix(wa, "Bearer ") || !strings.Contains(wa, `resource_metadata="`+wantMeta+`"`) {
				t.Errorf("WWW-Authenticate %q, want Bearer resource_metadata=%q", wa, wantMeta)
			}
			if strings.Contains(wa, `error="invalid_token"`) != tc.invalid {
				t.Errorf("WWW-Authenticate %q: invalid_token only when a token was refused", wa)
			}
			if str(r.Body, "code") != "UNAUTHENTICATED" || str(r.Body, "auditId") == "" {
				t.Errorf("body %s", r.Raw)
			}
		})
	}
	for path, resource := range map[string]string{"": g.URL, "/mcp": g.URL + "/mcp"} {
		t.Run("metadata"+path, func(t *testing.T) {
			r := g.get("/.well-known/oauth-protected-resource"+path, "")
			expect(t, r, http.StatusOK)
			if str(r.Body, "resource") != resource || str(r.Body, "jwks_uri") != g.URL+"/.well-known/jwks.json" {
				t.Errorf("metadata %s", r.Raw)
			}
			if methods, _ := r.Body["bearer_methods_supported"].([]any); len(methods) != 1 || methods[0] != "header" {
				t.Errorf("bearer_methods_supported in %s", r.Raw)
			}
		})
	}
}

// TestCORS: only --cors-origin origins get a CORS grant; preflights are answered before
// authentication and write no audit record.
func TestCORS(t *testing.T) {
	const listed, other = "https://inspector.example", "https://evil.example"
	g := startGateway(t, "", "--cors-origin", listed, "--cors-origin", "http://localhost:6274")
	db := rawDB(t, g)
	preflight := func(origin, path string) response {
		req, _ := http.NewRequest(http.MethodOptions, g.URL+path, nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type, mcp-protocol-version")
		return g.do(req)
	}
	for _, path := range []string{"/mcp", "/v1/capabilities/invoke", "/.well-known/oauth-protected-resource"} {
		t.Run("listed preflight "+path, func(t *testing.T) {
			r := preflight(listed, path)
			expect(t, r, http.StatusNoContent)
			h := r.Header
			if h.Get("Access-Control-Allow-Origin") != listed || !strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") ||
				!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") || !strings.Contains(h.Get("Vary"), "Origin") {
				t.Errorf("preflight headers %v", h)
			}
		})
		t.Run("unlisted preflight "+path, func(t *testing.T) {
			r := preflight(other, path)
			for k := range r.Header {
				if strings.HasPrefix(strings.ToLower(k), "access-control-") {
					t.Errorf("an unlisted origin got %s: %v", k, r.Header)
				}
			}
		})
	}
	t.Run("listed call", func(t *testing.T) {
		agent := g.token("--subject", "agent:support-bot", "--env", "project")
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/capabilities/search", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", listed)
		req.Header.Set("Authorization", "Bearer "+agent)
		r := g.do(req)
		expect(t, r, http.StatusOK)
		if r.Header.Get("Access-Control-Allow-Origin") != listed || !strings.Contains(r.Header.Get("Access-Control-Expose-Headers"), "WWW-Authenticate") {
			t.Errorf("headers %v", r.Header)
		}
		req.Header.Set("Origin", other)
		if r := g.do(req); r.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("unlisted origin granted: %v", r.Header)
		}
	})
	// The gateway's stop writes any open aggregate of unauthenticated attempts: there is none.
	g.stop()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM audit_log WHERE decision = 'unauthenticated'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		raw, _ := json.Marshal(n)
		t.Errorf("preflights wrote %s unauthenticated audit record(s)", raw)
	}
}
