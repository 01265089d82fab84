package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/identity/hydratest"
)

// TestConsoleOIDC signs a person in to the console through a real hydra: the gateway runs with
// --issuer hydra and --console-client-id, a login and consent app accepts alice (an org admin)
// with her claims in the access token, and test/console/console-oidc.test.mjs clicks "Sign in
// with <issuer>", goes through hydra's authorization code flow with PKCE, lands on
// /console/approvals signed in as alice and sees the org's held call through the API.
func TestConsoleOIDC(t *testing.T) {
	node, chromium, dir := consoleBrowser(t, "the console's OIDC sign-in test")
	needHydra(t, "the console's OIDC sign-in test")

	h := hydratest.StartWithLogin(t, map[string]hydratest.Person{
		"":                  {Subject: "user:alice", AccessToken: map[string]any{"xema_org_role": "org_admin", "xema_env": "org"}},
		"agent:support-bot": {Subject: "agent:support-bot", AccessToken: map[string]any{"xema_env": "project"}},
	})
	// hydra puts the consent's session.access_token claims under "ext" in a JWT access token.
	mapping := filepath.Join(t.TempDir(), "hydra-mapping.json")
	if err := os.WriteFile(mapping, []byte(`{"subjectRef": "sub", "orgRole": {"claim": "ext.xema_org_role"},
		"org": {"claim": "ext.xema_org"}, "project": {"claim": "ext.xema_project"}, "environment": {"claim": "ext.xema_env"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	client := h.CreatePublicClient(t, "http://127.0.0.1:1/console/callback", "xema")
	g := startGateway(t, "", "--issuer", h.Issuer, "--audience", "xema", "--default-org", "default", "--claim-mapping", mapping,
		"--console-client-id", client.ID, "--egress-allow", "127.0.0.1/32")
	callback := g.URL + "/console/callback"
	h.SetRedirectURI(t, client, callback)

	// The org's data, made by the API with tokens from the same flow (no browser).
	admin := h.AuthorizationCodeToken(t, client, callback, "xema", "")
	bot := h.AuthorizationCodeToken(t, client, callback, "xema", "agent:support-bot")
	prov := newProvider(t)
	sub := g.install(admin, biomeDir(t, "ticketing", prov.URL))
	expect(t, g.grantCustomized(admin, sub, map[string]any{commentRef: map[string]any{"requiresApproval": true}}), http.StatusCreated)
	r := g.post("/v1/capabilities/invoke", bot, map[string]any{"ref": commentRef,
		"input": map[string]any{"ticketId": "3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88", "text": "held for alice"}})
	expect(t, r, http.StatusAccepted)
	held := str(r.Body, "approvalId")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "console-oidc.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XEMA_URL="+g.URL, "ISSUER="+h.Issuer, "ISSUER_URL="+h.PublicURL, "LOGIN_URL="+h.LoginURL,
		"PERSON=user:alice", "HELD="+held, "SCREENSHOTS="+filepath.Join(repoRoot(t), "docs", "console"), "CHROMIUM="+chromium)
	out, err := cmd.CombinedOutput()
	t.Logf("console-oidc.test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the browser test failed: %v", err)
	}
	// No token (a JWT starts eyJ) and no authorization code in the gateway's log.
	logs := g.logs.String()
	if regexp.MustCompile(`eyJ[A-Za-z0-9_-]{10,}`).MatchString(logs) || strings.Contains(logs, "code=") {
		t.Errorf("the gateway's log holds a token or a code:\n%s", logs)
	}
}
