package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConsole runs test/console/console.test.mjs, a headless Chromium driven by
// playwright-core, against the built gateway: sign in, approve a held call and see it run,
// reject one with a reason, find a denial by ref and read its why-denied, approve a grant
// from a digest. The screenshots it takes are docs/console/*.png (docs/console.md).
func TestConsole(t *testing.T) {
	node, chromium, dir := consoleBrowser(t, "the console's browser test")

	g := startGateway(t, "")
	prov := newProvider(t)
	admin := g.adminToken()
	bot := g.token("--subject", "agent:support-bot", "--env", "project")
	public := g.token("--subject", "agent:support-bot", "--env", "public-session")

	sub := g.install(admin, biomeDir(t, "ticketing", prov.URL))
	expect(t, g.grantCustomized(admin, sub, map[string]any{commentRef: map[string]any{"requiresApproval": true}}), http.StatusCreated)
	held := func(text string) string {
		r := g.post("/v1/capabilities/invoke", bot, map[string]any{"ref": commentRef,
			"input": map[string]any{"ticketId": "3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88", "text": text}})
		expect(t, r, http.StatusAccepted)
		return str(r.Body, "approvalId")
	}
	toApprove, toReject := held("approve me"), held("reject me")
	den := g.post("/v1/capabilities/invoke", public, map[string]any{"ref": "workflow:run.start@1", "input": map[string]any{"workflowId": "onboarding"}})
	expect(t, den, http.StatusForbidden)
	// A newer version, submitted and not yet granted: its digest shows the diff.
	v2 := g.post("/v1/biomes", admin, submission(t, biomeDir(t, "ticketing-v2", prov.URL)))
	expect(t, v2, http.StatusCreated)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "console.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XEMA_URL="+g.URL, "XEMA_TOKEN="+admin, "HELD_APPROVE="+toApprove, "HELD_REJECT="+toReject,
		"DENIED_REF=workflow:run.start@1", "DENIED_AUDIT="+str(den.Body, "auditId"),
		"BIOME_ID="+str(v2.Body, "biomeId"), "BIOME_VERSION="+str(v2.Body, "version"),
		"SCREENSHOTS="+filepath.Join(repoRoot(t), "docs", "console"), "CHROMIUM="+chromium)
	out, err := cmd.CombinedOutput()
	t.Logf("console.test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the browser test failed: %v", err)
	}

	// What the browser did, as the API sees it.
	inv := g.get("/v1/invocations/"+toApprove, bot)
	expect(t, inv, http.StatusOK)
	if str(inv.Body, "status") != "done" || !strings.Contains(string(inv.Raw), "approve me") || prov.count() != 1 {
		t.Errorf("the approved call: %s (provider calls %d)", inv.Raw, prov.count())
	}
	rej := g.get("/v1/invocations/"+toReject, bot)
	if str(rej.Body, "status") != "rejected" || str(rej.Body, "reason") != "not during the freeze" {
		t.Errorf("the rejected call: %s", rej.Raw)
	}
	grants := g.get("/v1/grants?biomeId=ticketing", admin)
	if !strings.Contains(string(grants.Raw), `"version":"1.1.0"`) || !strings.Contains(string(grants.Raw), `"per":"1m"`) {
		t.Errorf("no customized grant of ticketing 1.1.0: %s", grants.Raw)
	}
	if strings.Contains(g.logs.String(), admin) {
		t.Error("the gateway's log holds the console user's token")
	}
}

// consoleBrowser finds what test/console's scripts need (node, Chromium, npm ci's
// playwright-core), skipping the test, named what, when one is missing.
func consoleBrowser(t *testing.T, what string) (node, chromium, dir string) {
	t.Helper()
	chromium = os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("SKIP: no Chromium at %s (apt-get install chromium): %s did not run", chromium, what)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("SKIP: no node on PATH: %s did not run", what)
	}
	dir = filepath.Join(repoRoot(t), "test", "console")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core")); err != nil {
		t.Skipf("SKIP: run `npm ci` in %s first: %s did not run", dir, what)
	}
	return node, chromium, dir
}
