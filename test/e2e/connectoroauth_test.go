package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/xemahq/xema/internal/identity/hydratest"
)

// TestConnectorOAuthCredential: a connector bound to an OAuth credential (GitHub's OAuth app
// model: a pre-registered client with a secret) acts as the person who connected the org's
// account. The authorization server is a real hydra; GitHub cannot run here, so its REST
// API is a fake following GitHub's documented wire format (POST /repos/{owner}/{repo}/issues
// with a Bearer token, 201 with the issue), which accepts only a token hydra says is active
// and names its subject.
func TestConnectorOAuthCredential(t *testing.T) {
	hydra := hydratest.StartWithLogin(t, map[string]hydratest.Person{"": {Subject: "alice@github"}})
	var mu sync.Mutex
	var seen []string // the subjects of the tokens the fake GitHub accepted
	var tokens []string
	gh := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		resp, err := http.PostForm(hydra.AdminURL+"/admin/oauth2/introspect", url.Values{"token": {tok}})
		var in struct {
			Active bool   `json:"active"`
			Sub    string `json:"sub"`
		}
		if err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&in)
			resp.Body.Close()
		}
		if !in.Active || r.Method != http.MethodPost || r.URL.Path != "/repos/xema/app/issues" {
			http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
			return
		}
		mu.Lock()
		seen, tokens = append(seen, in.Sub), append(tokens, tok)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"number":7,"html_url":"https://github.example/xema/app/issues/7","title":"t","state":"open","created_at":"2026-12-06T00:00:00Z"}`))
	}))
	t.Cleanup(gh.Close)

	g := startGateway(t, "")
	admin := g.token("--subject", "user:alice", "--org-role", "org_admin", "--env", "org", "--org", "acme")
	wf := g.token("--subject", "workflow:release", "--env", "project", "--org", "acme", "--project", "p1")
	installConnectors(t, g, admin)

	// The org's OAuth app at the authorization server, as an admin registers one at GitHub.
	var app struct {
		ID     string `json:"client_id"`
		Secret string `json:"client_secret"`
	}
	body, _ := json.Marshal(map[string]any{"grant_types": []string{"authorization_code", "refresh_token"}, "response_types": []string{"code"},
		"token_endpoint_auth_method": "client_secret_basic", "redirect_uris": []string{g.URL + "/v1/connections/callback"},
		"scope": "openid offline_access offline", "access_token_strategy": "jwt"})
	resp, err := http.Post(hydra.AdminURL+"/admin/clients", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if json.Unmarshal(raw, &app) != nil || app.Secret == "" {
		t.Fatalf("hydra client: %s", raw)
	}
	oauth := map[string]any{"owner": "org", "authorizationEndpoint": hydra.PublicURL + "/oauth2/auth", "tokenEndpoint": hydra.TokenURL(),
		"revocationEndpoint": hydra.PublicURL + "/oauth2/revoke", "clientId": app.ID, "scopes": []string{"offline_access"},
		"tokenAuthMethod": "client_secret_basic"}

	bad := map[string]any{}
	for k, v := range oauth {
		bad[k] = v
	}
	bad["tokenEndpoint"] = "http://github.example/login/oauth/access_token"
	if r := g.post("/v1/credentials", admin, map[string]any{"name": "gh", "provider": "github", "secret": app.Secret, "oauth": bad}); r.Status != http.StatusBadRequest ||
		!strings.Contains(string(r.Raw), "/oauth/tokenEndpoint") {
		t.Fatalf("an OAuth credential with a plain-http token endpoint: %d %s", r.Status, r.Raw)
	}
	credID, _ := connectorSetup(t, g, admin,
		map[string]any{"name": "acme github", "provider": "github", "secret": app.Secret, "oauth": oauth},
		map[string]any{"project": "p1", "environment": "project", "refPattern": "connector:*", "provider": "github",
			"baseUrl": gh.URL, "config": map[string]any{"repository": "xema/app"}})
	creds := g.get("/v1/credentials", admin)
	if !strings.Contains(string(creds.Raw), `"kind":"oauth"`) {
		t.Fatalf("credentials: %s", creds.Raw)
	}

	issue := map[string]any{"ref": refIssue, "input": map[string]any{"title": "t"}}
	den := g.post("/v1/capabilities/invoke", wf, issue)
	if den.Status != http.StatusForbidden || !strings.Contains(string(den.Raw), "CONNECTION_REQUIRED") || !strings.Contains(string(den.Raw), `"owner":"org"`) {
		t.Fatalf("before the org's account is connected: %d %s", den.Status, den.Raw)
	}

	// An org admin connects the org's account (a member may not).
	member := g.token("--subject", "user:bob", "--org-role", "org_member", "--env", "org", "--org", "acme")
	if r := g.post("/v1/connections", member, map[string]any{"providerId": credID, "owner": "org"}); r.Status != http.StatusForbidden {
		t.Fatalf("a member connecting the org's account: %d %s", r.Status, r.Raw)
	}
	start := g.post("/v1/connections", admin, map[string]any{"providerId": credID})
	expect(t, start, http.StatusOK)
	if status, page := callback(t, hydra.Authorize(t, str(start.Body, "url"), "").String(), start.Header); status != http.StatusOK ||
		!strings.Contains(page, "Connected the org") {
		t.Fatalf("callback: %d %s", status, page)
	}

	r := g.post("/v1/capabilities/invoke", wf, issue)
	expect(t, r, http.StatusOK) // issues are not held for approval (the connectors biome)
	if out, _ := r.Body["output"].(map[string]any); str(out, "status") != "open" {
		t.Fatalf("issue: %s", r.Raw)
	}
	mu.Lock()
	got := append([]string(nil), seen...)
	toks := append([]string(nil), tokens...)
	mu.Unlock()
	if len(got) != 1 || got[0] != "alice@github" {
		t.Fatalf("GitHub saw tokens of %v; want the org account alice connected", got)
	}
	assertNoSecret(t, g, append(toks, app.Secret), creds.Raw, start.Raw, r.Raw)
}
