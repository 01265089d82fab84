package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xemahq/xema/internal/connection/connectiontest"
	"github.com/xemahq/xema/internal/identity/hydratest"
)

// TestConsole runs test/console/console.test.mjs, a headless Chromium driven by
// playwright-core, against the built gateway: sign in, read the overview, approve a held
// call and see it run, reject one with a reason, find a denial by ref and read its
// why-denied, approve a grant from a digest, read a capability's page and the providers, and
// the views of an admin of another org and of an agent. Afterwards the overview's figures are
// checked against the audit API over the scripted mix of calls and the console's own reads.
// The screenshots it takes are docs/console/*.png (docs/console.md).
func TestConsole(t *testing.T) {
	node, chromium, dir := consoleBrowser(t, "the console's browser test")

	// The Connections page connects to a real OAuth-protected MCP server whose authorization
	// server is a real hydra; without hydra those steps are skipped (visibly).
	var hydra *hydratest.Server
	var protected *connectiontest.Server
	if haveHydra(t, "the console's Connections steps") {
		hydra = hydratest.StartWithLogin(t, map[string]hydratest.Person{
			"": {Subject: "user:alice"}, "user:alice": {Subject: "user:alice"}}, hydratest.DynamicRegistration()...)
		protected = connectiontest.Start(t, hydra)
	}
	// The callback's redirect URI is under --public-url; the development issuer lets outbound
	// calls reach loopback (hydra, the protected server).
	g := startGateway(t, "", "--public-url", urlVar)
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
	// The rest of the mix the overview counts: allowed reads, another denial, a call that
	// fails (an unknown ref) and one with invalid input.
	for range 3 {
		expect(t, g.post("/v1/capabilities/invoke", bot, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}}), http.StatusOK)
	}
	expect(t, g.post("/v1/capabilities/invoke", public, map[string]any{"ref": "workflow:run.start@1", "input": map[string]any{"workflowId": "offboarding"}}), http.StatusForbidden)
	// An agent acting for a person: the audit view names both.
	forAnn := g.token("--subject", "user:ann", "--org-role", "org_member", "--env", "project", "--act", "agent:support-bot")
	expect(t, g.post("/v1/capabilities/invoke", forAnn, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}}), http.StatusOK)
	expect(t, g.post("/v1/capabilities/invoke", bot, map[string]any{"ref": "kb:nothing.here@1", "input": map[string]any{}}), http.StatusNotFound)
	expect(t, g.post("/v1/capabilities/invoke", bot, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "NOT VALID"}}), http.StatusBadRequest)
	// What the providers view lists: a credential (never its secret) and a binding.
	const secret = "console-test-secret-never-shown"
	connectorSetup(t, g, admin, map[string]any{"name": "scm-bot", "provider": "gitea", "secret": secret},
		map[string]any{"refPattern": "connector:scm.*", "provider": "gitea", "baseUrl": prov.URL, "config": map[string]any{"repository": "xema/app"}})
	// What the providers view registers: a real MCP server (the go-sdk's) with one tool.
	tools := goMCPServer(t, func(s *mcp.Server) {
		addRawTool(s, "shout", "Shouts", map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}})
	})
	acme := g.token("--subject", "user:bob", "--org-role", "org_admin", "--env", "org", "--org", "acme")
	approver := g.token("--subject", "user:carol", "--org-role", "org_member", "--env", "project")
	// A newer version, submitted and not yet granted: its digest shows the diff.
	v2 := g.post("/v1/biomes", admin, submission(t, biomeDir(t, "ticketing-v2", prov.URL)))
	expect(t, v2, http.StatusCreated)

	// A server of user connections (each person connects their own account).
	connectEnv := []string{}
	if protected != nil {
		expect(t, g.post("/v1/mcp-servers", admin, map[string]any{"providerId": "tools", "transport": "streamable-http", "url": protected.URL,
			"auth": map[string]any{"kind": "oauth", "owner": "user"}}), http.StatusCreated)
		connectEnv = []string{"CONNECT_SERVER=tools", "ISSUER_URL=" + hydra.PublicURL, "LOGIN_URL=" + hydra.LoginURL}
	}

	// Generous: the script's ~20 steps take 1-2 minutes, and several times that on a loaded CI machine.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "console.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XEMA_URL="+g.URL, "XEMA_TOKEN="+admin, "HELD_APPROVE="+toApprove, "HELD_REJECT="+toReject,
		"ACME_TOKEN="+acme, "AGENT_TOKEN="+bot, "APPROVER_TOKEN="+approver, "SECRET="+secret,
		"PROVIDER_URL="+prov.URL, "MCP_URL="+tools.URL(),
		"DENIED_REF=workflow:run.start@1", "DENIED_AUDIT="+str(den.Body, "auditId"), "DENIED_NEXT="+firstNext(t, den),
		"BIOME_ID="+str(v2.Body, "biomeId"), "BIOME_VERSION="+str(v2.Body, "version"),
		"SCREENSHOTS="+filepath.Join(repoRoot(t), "docs", "console"), "CHROMIUM="+chromium)
	cmd.Env = append(cmd.Env, connectEnv...)
	out, err := cmd.CombinedOutput()
	t.Logf("console.test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the browser test failed: %v", err)
	}
	if protected != nil {
		// The browser connected alice's account and disconnected it: the gateway holds none.
		cs := g.get("/v1/connections", admin)
		expect(t, cs, http.StatusOK)
		if list, _ := cs.Body["connections"].([]any); len(list) != 0 {
			t.Errorf("connections left after the browser disconnected: %s", cs.Raw)
		}
		if regexp.MustCompile(`eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}`).MatchString(g.logs.String()) {
			t.Error("the gateway's log holds a JWT")
		}
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
	overviewAgreesWithAudit(t, g, admin)
}

// overviewAgreesWithAudit checks every figure of GET /v1/stats against the records GET
// /v1/audit answers for the same org, range and omit=: the calls by outcome (and the series
// summing to them), the top refs and denial reasons, the runners' runs and errors, and each
// denial reason's count against the audit search the overview links it to.
func overviewAgreesWithAudit(t *testing.T, g *gateway, admin string) {
	t.Helper()
	st := g.get("/v1/stats?window=1h", admin)
	expect(t, st, http.StatusOK)
	var stats struct {
		Since, Until, Omit string
		Series             []map[string]any
		Totals             map[string]float64
		TopDenialReasons   []struct {
			Code  string
			Count float64
		}
		TopRefs []struct {
			Ref   string
			Count float64
		}
		Runners []struct {
			Runner       string
			Runs, Errors float64
		}
	}
	if err := json.Unmarshal(st.Raw, &stats); err != nil {
		t.Fatal(err)
	}
	records := auditRecords(t, g, admin, url.Values{"since": {stats.Since}, "until": {stats.Until}, "omit": {stats.Omit}})
	class := map[string]string{"allowed": "allowed", "denied": "denied", "pending-approval": "held",
		"invalid-input": "failed", "unknown-capability": "failed", "error": "failed"}
	totals, refs, reasons, runs, errs := map[string]float64{}, map[string]float64{}, map[string]float64{}, map[string]float64{}, map[string]float64{}
	for _, r := range records {
		decision, runner := fmt.Sprint(r["decision"]), str(r, "runner")
		if c, ok := class[decision]; ok && runner == "" {
			totals[c]++
			totals["calls"]++
			refs[fmt.Sprint(r["capability"])]++
		}
		if decision == "denied" {
			seen := map[string]bool{}
			reasonList, _ := r["reasons"].([]any)
			for _, x := range reasonList {
				code := str(x.(map[string]any), "code")
				if !seen[code] {
					seen[code] = true
					reasons[code]++
				}
			}
		}
		if decision == "allowed" && runner != "" && runner != "approval" {
			runs[runner]++
			if str(r, "outcome") != "ok" {
				errs[runner]++
			}
		}
	}
	if totals["calls"] < 10 || totals["denied"] < 2 || totals["held"] < 2 || totals["failed"] < 2 || totals["allowed"] < 4 {
		t.Errorf("the scripted mix is not all in the audit log's calls: %v", totals)
	}
	for _, k := range []string{"calls", "allowed", "denied", "held", "failed"} {
		if stats.Totals[k] != totals[k] {
			t.Errorf("overview %s = %v, the audit log's %v", k, stats.Totals[k], totals[k])
		}
	}
	summed := map[string]float64{}
	for _, b := range stats.Series {
		for _, k := range []string{"allowed", "denied", "held", "failed"} {
			summed[k] += b[k].(float64)
		}
	}
	for _, k := range []string{"allowed", "denied", "held", "failed"} {
		if summed[k] != totals[k] {
			t.Errorf("the series sums %s to %v, the audit log has %v", k, summed[k], totals[k])
		}
	}
	for _, r := range stats.TopRefs {
		if refs[r.Ref] != r.Count {
			t.Errorf("overview: %s %v calls, the audit log %v", r.Ref, r.Count, refs[r.Ref])
		}
	}
	if len(stats.TopRefs) != min(len(refs), 10) {
		t.Errorf("overview names %d refs, the audit log has %d", len(stats.TopRefs), len(refs))
	}
	if len(stats.TopDenialReasons) != min(len(reasons), 10) {
		t.Errorf("overview names %d denial reasons, the audit log has %d", len(stats.TopDenialReasons), len(reasons))
	}
	for _, r := range stats.TopDenialReasons {
		linked := auditRecords(t, g, admin, url.Values{"since": {stats.Since}, "until": {stats.Until}, "omit": {stats.Omit},
			"decision": {"denied"}, "reason": {r.Code}})
		if reasons[r.Code] != r.Count || float64(len(linked)) != r.Count {
			t.Errorf("overview: %s %v denials, the audit log %v, its search %d", r.Code, r.Count, reasons[r.Code], len(linked))
		}
	}
	for _, r := range stats.Runners {
		if runs[r.Runner] != r.Runs || errs[r.Runner] != r.Errors {
			t.Errorf("overview: runner %s %v runs %v errors, the audit log %v, %v", r.Runner, r.Runs, r.Errors, runs[r.Runner], errs[r.Runner])
		}
	}
	if len(stats.Runners) != len(runs) {
		t.Errorf("overview names %d runners, the audit log %d", len(stats.Runners), len(runs))
	}
}

// auditRecords pages through GET /v1/audit with q.
func auditRecords(t *testing.T, g *gateway, token string, q url.Values) []map[string]any {
	t.Helper()
	var out []map[string]any
	q.Set("limit", "100")
	for range 100 {
		page := g.get("/v1/audit?"+q.Encode(), token)
		expect(t, page, http.StatusOK)
		recs, _ := page.Body["records"].([]any)
		for _, r := range recs {
			out = append(out, r.(map[string]any))
		}
		next := str(page.Body, "nextCursor")
		if next == "" {
			return out
		}
		q.Set("cursor", next)
	}
	t.Fatal("the audit search does not end")
	return nil
}

// haveHydra is whether the hydra binary is there (built and cached when missing); without
// it, what depends on it is skipped with a visible message, unless XEMA_TEST_REQUIRE_HYDRA=1
// makes that a failure.
func haveHydra(t *testing.T, what string) bool {
	t.Helper()
	if _, err := hydratest.BuildBinary(t.Logf); err != nil {
		if os.Getenv("XEMA_TEST_REQUIRE_HYDRA") == "1" {
			t.Fatalf("no hydra (XEMA_TEST_REQUIRE_HYDRA=1): %s cannot run: %v", what, err)
		}
		t.Logf("SKIP: no hydra (%v): %s did not run", err, what)
		return false
	}
	return true
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

// firstNext is the first of a denial's next steps (package explain's words), which the
// console must show as they are.
func firstNext(t *testing.T, den response) string {
	t.Helper()
	next, _ := den.Body["next"].([]any)
	if len(next) == 0 {
		t.Fatalf("the denial names no next step: %s", den.Raw)
	}
	return next[0].(string)
}
