package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
)

// helloProvider is the provider of `xema biome init`'s capability: it answers the greeting
// and keeps the last request it received.
type helloProvider struct {
	URL  string
	mu   sync.Mutex
	last *http.Request
	body []byte
}

func newHelloProvider(t *testing.T) *helloProvider {
	p := &helloProvider{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var in struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(body, &in)
		p.mu.Lock()
		p.last, p.body = r.Clone(r.Context()), body
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"greeting": "Hello, " + in.Name})
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// TestAuthoring walks docs/authoring.md: init, lint, submit (problems with their pointers,
// text and JSON), grant --dry-run then grant, invoke, the exact request the provider receives
// and its token verified against the gateway's JWKS, a denial printed with its auditId, and
// deprecation.
func TestAuthoring(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		admin := g.adminToken()
		prov := newHelloProvider(t)
		dir := filepath.Join(t.TempDir(), "greeter")
		api := []string{"--server", g.URL, "--token", admin}

		out, err := g.run("biome", "init", dir, "--url", prov.URL+"/hello")
		if err != nil || !strings.Contains(out, "greeter 0.1.0: valid") {
			t.Fatalf("biome init: %v\n%s", err, out)
		}
		if out, err := g.run("biome", "lint", dir); err != nil {
			t.Fatalf("lint of init's biome: %v\n%s", err, out)
		}

		t.Run("submit names the server's problems", func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "greeter")
			if out, err := g.run("biome", "init", bad); err != nil {
				t.Fatal(out)
			}
			// Without its invocation the capability lints, but has no way to run: the gateway refuses it.
			f := filepath.Join(bad, "contributions", "hello.capability.contribution.json")
			var c map[string]any
			raw, _ := os.ReadFile(f)
			_ = json.Unmarshal(raw, &c)
			delete(c, "invocation")
			raw, _ = json.Marshal(c)
			_ = os.WriteFile(f, raw, 0o644)
			out, err := g.run(append([]string{"biome", "submit", bad}, api...)...)
			if err == nil || !strings.Contains(out, "INVALID_MANIFEST") || !strings.Contains(out, "\n  /contributions/0") || !strings.Contains(out, "auditId inv_") {
				t.Fatalf("submit of a biome without a runner: %v\n%s", err, out)
			}
			out, err = g.run(append([]string{"biome", "submit", bad, "--format", "json"}, api...)...)
			js := out[:strings.LastIndex(out, "}")+1]
			var body struct {
				Code       string `json:"code"`
				AuditID    string `json:"auditId"`
				Violations []struct{ Path, Message string }
			}
			if err == nil || json.Unmarshal([]byte(js), &body) != nil || body.Code != "INVALID_MANIFEST" || len(body.Violations) == 0 ||
				!strings.HasPrefix(body.Violations[0].Path, "/contributions/0") || body.AuditID == "" {
				t.Fatalf("submit --format json: %v\n%s", err, out)
			}
		})

		// Each file init writes names its schema for editors; the gateway takes it as written.
		for _, f := range []string{"biome.json", filepath.Join("contributions", "hello.capability.contribution.json")} {
			raw, _ := os.ReadFile(filepath.Join(dir, f))
			var doc struct {
				Schema string `json:"$schema"`
			}
			if json.Unmarshal(raw, &doc) != nil || !strings.HasPrefix(doc.Schema, "https://xema.dev/schemas/") {
				t.Fatalf("init's %s names no schema:\n%s", f, raw)
			}
		}

		// Text by default: the digest, what it asks for and the next step; JSON on request.
		out, err = g.run(append([]string{"biome", "submit", dir}, api...)...)
		if err != nil || !strings.HasPrefix(out, "submitted greeter 0.1.0: permission digest sha256:") ||
			!regexp.MustCompile(`(?m)^  greeter +greeter:hello@1 +low +- +Greets someone`).MatchString(out) ||
			!strings.Contains(out, "next: an org admin approves it: xema grant create --biome greeter --version 0.1.0") {
			t.Fatalf("submit: %v\n%s", err, out)
		}
		if out, err := g.run(append([]string{"biome", "submit", dir, "--format", "json"}, api...)...); err != nil || !strings.Contains(out, `"hash": "sha256:`) {
			t.Fatalf("submit --format json: %v\n%s", err, out)
		}

		out, err = g.run(append([]string{"grant", "create", "--biome", "greeter", "--version", "0.1.0", "--dry-run", "--since", "1h"}, api...)...)
		if err != nil || !strings.Contains(out, "dry run (nothing recorded): greeter@0.1.0") || !strings.Contains(out, "considered") {
			t.Fatalf("grant --dry-run: %v\n%s", err, out)
		}
		if out, _ := g.run(append([]string{"grant", "list", "--biome", "greeter"}, api...)...); strings.Contains(out, "greeter\t") || strings.Count(out, "\n") > 1 {
			t.Fatalf("the dry run recorded a grant:\n%s", out)
		}
		out, err = g.run(append([]string{"grant", "create", "--biome", "greeter", "--version", "0.1.0"}, api...)...)
		if err != nil || !strings.Contains(out, "profile read-only-assistant") {
			t.Fatalf("grant: %v\n%s", err, out)
		}

		agent := g.token("--subject", "agent:support-bot", "--env", "project")
		r := g.post("/v1/capabilities/invoke", agent, map[string]any{"ref": "greeter:hello@1", "input": map[string]any{"name": "Ada"}})
		expect(t, r, http.StatusOK)
		if str(r.Body, "output.greeting") != "Hello, Ada" {
			t.Fatalf("invoke: %s", r.Raw)
		}

		t.Run("the provider's request", func(t *testing.T) {
			prov.mu.Lock()
			req, body := prov.last, prov.body
			prov.mu.Unlock()
			if req.Method != http.MethodPost || req.URL.Path != "/hello" || string(body) != `{"name":"Ada"}` ||
				req.Header.Get("Content-Type") != "application/json" || req.Header.Get("X-Xema-Ref") != "greeter:hello@1" ||
				req.Header.Get("X-Xema-Audit-Id") != str(r.Body, "auditId") {
				t.Fatalf("provider got %s %s %q headers %v", req.Method, req.URL.Path, body, req.Header)
			}
			// Verify the bearer as docs/authoring.md says: the gateway's JWKS, the provider's own
			// audience, xema_use outbound.
			jwks, err := keyfunc.NewDefault([]string{g.URL + "/.well-known/jwks.json"})
			if err != nil {
				t.Fatal(err)
			}
			bearer := strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")
			tok, err := jwt.Parse(bearer, jwks.Keyfunc, jwt.WithAudience("xema-provider:"+prov.URL), jwt.WithExpirationRequired(),
				jwt.WithValidMethods([]string{"ES256", "RS256"}))
			if err != nil {
				t.Fatalf("the provider's token does not verify: %v", err)
			}
			claims := tok.Claims.(jwt.MapClaims)
			if claims["xema_use"] != "outbound" || claims["sub"] != "service:xema-gateway" {
				t.Fatalf("claims %v", claims)
			}
			if _, err := jwt.Parse(bearer, jwks.Keyfunc, jwt.WithAudience("xema-provider:http://other.example")); err == nil {
				t.Fatal("the token verified for another provider's audience")
			}
		})

		t.Run("a denial is printed with its auditId", func(t *testing.T) {
			member := g.token("--subject", "user:bob", "--org-role", "org_member", "--env", "org")
			out, err := g.run("grant", "create", "--biome", "greeter", "--version", "0.1.0", "--server", g.URL, "--token", member)
			if err == nil || !strings.Contains(out, "DENIED (HTTP 403)") || !strings.Contains(out, "(auditId deny_") || !strings.Contains(out, "reason ") {
				t.Fatalf("a member's grant: %v\n%s", err, out)
			}
		})

		lc := g.post("/v1/lifecycle", admin, map[string]any{"ref": "greeter:hello@1", "to": "deprecated"})
		expect(t, lc, http.StatusCreated)
		desc := g.post("/v1/capabilities/search", agent, map[string]any{"query": "hello"})
		if !strings.Contains(string(desc.Raw), `"deprecated":true`) {
			t.Fatalf("search after deprecation: %s", desc.Raw)
		}
	})
}
