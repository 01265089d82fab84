package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Attacks of the third security round (docs/security.md): idempotent replays as decisions,
// resource globs that bind, idle connections, masking, terminal output, held calls of
// another org granted the same ref.

// invokeKey posts an invoke with an Idempotency-Key.
func (g *gateway) invokeKey(token, key string, body any) response {
	g.t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/capabilities/invoke", strings.NewReader(string(raw)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	return g.do(req)
}

// auditChildren are the records linked to parent, by outcome.
func (g *gateway) auditChildren(admin, parent string) map[string][]map[string]any {
	g.t.Helper()
	r := g.get("/v1/audit?parent="+parent, admin)
	expect(g.t, r, http.StatusOK)
	out := map[string][]map[string]any{}
	recs, _ := r.Body["records"].([]any)
	for _, x := range recs {
		rec := x.(map[string]any)
		out[str(rec, "outcome")] = append(out[str(rec, "outcome")], rec)
	}
	return out
}

// TestReplayIsADecision: a key replays the first answer only for the same org, subject and
// decision context; any other context is IDEMPOTENCY_KEY_REUSED and never the page; a replay
// is audited linked to the first call, and once the policy denies the call the replay is the
// denial. Over HTTP and MCP.
func TestReplayIsADecision(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		alice := g.token("--subject", "user:alice", "--org-role", "org_admin", "--env", "org", "--org", "acme")
		expect(t, g.installOperatorBiome(alice, nil), http.StatusCreated)
		as := func(extra ...string) string {
			return g.token(append([]string{"--subject", "agent:support-bot", "--org", "acme"}, extra...)...)
		}
		bot := as("--env", "project")
		first := g.invokeKey(bot, "K1", pageRead())
		expect(t, first, http.StatusOK)
		orig := str(first.Body, "auditId")
		page := first.Body["output"].(map[string]any)["title"].(string)

		for name, tok := range map[string]string{
			"public-session":  as("--env", "public-session"),
			"armed elsewhere": as("--env", "project", "--armed", "connector:*"),
			"another group":   as("--env", "project", "--group", "ops"),
			"another session": as("--env", "project", "--session", "s-2"),
			"another project": as("--env", "project", "--project", "p-2"),
		} {
			r := g.invokeKey(tok, "K1", pageRead())
			if r.Status != http.StatusUnprocessableEntity || str(r.Body, "code") != "IDEMPOTENCY_KEY_REUSED" ||
				r.Header.Get("Idempotent-Replayed") != "" || strings.Contains(string(r.Raw), page) {
				t.Errorf("%s under the key: %d %s", name, r.Status, r.Raw)
			}
		}

		again := g.invokeKey(bot, "K1", pageRead())
		expect(t, again, http.StatusOK)
		if again.Header.Get("Idempotent-Replayed") != "true" || str(again.Body, "auditId") != orig {
			t.Fatalf("the same context is not a replay: %s", again.Raw)
		}
		s, err := mcpSession(t, g, bot)
		if err != nil {
			t.Fatal(err)
		}
		args := map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}, "idempotencyKey": "K1"}
		if body, isErr := callTool(t, s, "xema_capabilities_invoke", args); isErr || str(body, "auditId") != orig {
			t.Fatalf("MCP replay: %v %v", body, isErr)
		}
		pub, err := mcpSession(t, g, as("--env", "public-session"))
		if err != nil {
			t.Fatal(err)
		}
		if body, isErr := callTool(t, pub, "xema_capabilities_invoke", args); !isErr || str(body, "code") != "IDEMPOTENCY_KEY_REUSED" {
			t.Fatalf("MCP under another context: %v %v", body, isErr)
		}
		if n := len(g.auditChildren(alice, orig)["replayed"]); n != 2 {
			t.Fatalf("%d replay records linked to %s, want 2 (HTTP and MCP)", n, orig)
		}

		// The policy now denies the call: the replay is the denial, audited, linked.
		expect(t, g.installOperatorBiome(alice, map[string]any{"kb:page.read@1": map[string]any{"subjects": []string{"agent:someone-else"}}}),
			http.StatusCreated)
		denied := g.invokeKey(bot, "K1", pageRead())
		if denied.Status != http.StatusForbidden || denied.Header.Get("Idempotent-Replayed") != "" || strings.Contains(string(denied.Raw), page) {
			t.Fatalf("a replay the policy now denies: %d %s", denied.Status, denied.Raw)
		}
		rec := g.get("/v1/audit/"+str(denied.Body, "auditId"), alice)
		expect(t, rec, http.StatusOK)
		if str(rec.Body, "parentAuditId") != orig || str(rec.Body, "decision") != "denied" {
			t.Fatalf("the denied replay's record: %s", rec.Raw)
		}
		if body, isErr := callTool(t, s, "xema_capabilities_invoke", args); !isErr || strings.Contains(fmt.Sprint(body), page) {
			t.Fatalf("MCP replay the policy now denies: %v %v", body, isErr)
		}
	})
}

// TestResourceBindsOrIsRefused: x-xema-resource on an integer property is refused by lint
// and submit with its pointer; a call leaving its declared resource out under a grant that
// restricts resources is denied, on the first call and the tenth.
func TestResourceBindsOrIsRefused(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		prov := newProvider(t)
		acme := g.org("acme")
		dir := biomeDir(t, "ticketing", prov.URL)
		editJSON(t, filepath.Join(dir, "contributions", "comment.capability.contribution.json"), func(doc map[string]any) {
			props := doc["manifest"].(map[string]any)["inputSchema"].(map[string]any)["properties"].(map[string]any)
			props["noteId"] = map[string]any{"type": "integer", "x-xema-resource": true}
		})
		const pointer = "/manifest/inputSchema/properties/noteId/type"
		out, err := g.run("biome", "lint", dir)
		if err == nil || !strings.Contains(out, pointer) {
			t.Fatalf("lint accepted an integer resource: %v\n%s", err, out)
		}
		r := g.post("/v1/biomes", acme.admin, submission(t, dir))
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Raw), pointer) {
			t.Fatalf("submit of an integer resource: %d %s", r.Status, r.Raw)
		}

		// kb:page.read@1 declares pageId its resource: left out, the restricting grant denies it.
		expect(t, g.installOperatorBiome(acme.admin, map[string]any{"kb:page.read@1": map[string]any{"resources": []string{"welcome*"}}}),
			http.StatusCreated)
		expect(t, g.post("/v1/capabilities/invoke", acme.bot, pageRead()), http.StatusOK)
		for i := range 10 {
			for _, input := range []map[string]any{{}, {"title": "x"}} {
				d := g.post("/v1/capabilities/invoke", acme.bot, map[string]any{"ref": "kb:page.read@1", "input": input})
				if d.Status != http.StatusForbidden || !strings.Contains(string(d.Raw), "RESOURCE_NOT_REACHABLE") {
					t.Fatalf("call %d without the resource: %d %s", i+1, d.Status, d.Raw)
				}
			}
		}
		// Unrestricted, the same call reaches validation (400), not the policy's denial.
		expect(t, g.installOperatorBiome(acme.admin, nil), http.StatusCreated)
		expect(t, g.post("/v1/capabilities/invoke", acme.bot, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{}}), http.StatusBadRequest)
	})
}

// TestIdleFloodDoesNotStarve: with --max-connections 20, 20 keep-alive sockets that sent one
// request and idle, and 20 that never send one, leave new clients served (the idle timeout,
// 120 s, far beyond the clients' own timeout).
func TestIdleFloodDoesNotStarve(t *testing.T) {
	g := startGateway(t, "", "--max-connections", "20")
	addr := strings.TrimPrefix(g.URL, "http://")
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	for i := range 30 {
		cl := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{}}
		resp, err := cl.Get(g.URL + "/readyz")
		if err != nil {
			t.Fatalf("client %d not served: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("client %d: %d", i, resp.StatusCode)
		}
	}
}

// TestMaskedEverywhere: --decision-log-mask erases the resource, subject, environment and
// org from the exported event, reasons' details, suggestions and the gateway's part included.
func TestMaskedEverywhere(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		logFile := filepath.Join(t.TempDir(), "decisions.jsonl")
		g := startGateway(t, e.store(t), "--decision-log", "file:"+logFile, "--decision-log-mask", "/input/resource",
			"--decision-log-mask", "/input/subject", "--decision-log-mask", "/input/environment", "--decision-log-mask", "/input/org")
		admin := g.token("--subject", "user:alice", "--org-role", "org_admin", "--env", "org", "--org", "tenant-zq")
		expect(t, g.installOperatorBiome(admin, map[string]any{"kb:page.read@1": map[string]any{"resources": []string{"welcome*"}}}),
			http.StatusCreated)
		spy := g.token("--subject", "agent:spy-7731", "--env", "public-session", "--org", "tenant-zq")
		den := g.post("/v1/capabilities/invoke", spy, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "secret-plan-99"}})
		expect(t, den, http.StatusForbidden)
		g.stop()
		raw, err := os.ReadFile(logFile)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(raw), str(den.Body, "auditId")) || !strings.Contains(string(raw), "RESOURCE_NOT_REACHABLE") {
			t.Fatalf("the denial was not exported:\n%s", raw)
		}
		for _, secret := range []string{"secret-plan-99", "spy-7731", "public-session", "tenant-zq"} {
			if strings.Contains(string(raw), secret) {
				t.Errorf("masked %q exported:\n%s", secret, raw)
			}
		}
	})
}

// TestTerminalSafeOutput: a token whose subject carries escape sequences is refused; a caller's
// escape-laden resource, quoted in a denial's detail, reaches the admin's terminal escaped.
func TestTerminalSafeOutput(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		evil := g.token("--subject", "agent:x\x1b]0;PWNED\x07\x1b[2J", "--env", "project")
		r := g.post("/v1/capabilities/invoke", evil, pageRead())
		if r.Status != http.StatusUnauthorized {
			t.Fatalf("a subject with escape sequences: %d %s", r.Status, r.Raw)
		}
		admin := g.adminToken()
		expect(t, g.installOperatorBiome(admin, map[string]any{"kb:page.read@1": map[string]any{"resources": []string{"welcome*"}}}),
			http.StatusCreated)
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		den := g.post("/v1/capabilities/invoke", bot, map[string]any{"ref": "kb:page.read@1",
			"input": map[string]any{"pageId": "p\x1b]0;PWNED\x07\x1b[2J\u009b31m\nFAKE LINE"}})
		expect(t, den, http.StatusForbidden)
		for _, args := range [][]string{
			{"why-denied", str(den.Body, "auditId")},
			{"audit", "search"},
			{"audit", "search", "--format", "json"},
			{"approvals", "list"},
		} {
			out, err := g.run(append(args, "--server", g.URL, "--token", admin)...)
			if err != nil {
				t.Fatalf("xema %v: %v\n%s", args, err, out)
			}
			if strings.ContainsAny(out, "\x1b\x07\u009b") || strings.Contains(out, "\nFAKE LINE") {
				t.Errorf("xema %v printed raw control characters: %q", args, out)
			}
		}
		out, _ := g.run("why-denied", str(den.Body, "auditId"), "--server", g.URL, "--token", admin)
		if !strings.Contains(out, `\u001b]0;PWNED`) {
			t.Errorf("why-denied does not show the escaped resource: %q", out)
		}
	})
}

// TestApproverOfAnotherOrgWithTheSameGrant: acme and beta both hold the same ref under
// approval; beta's admin cannot approve acme's held call (404 as an unknown id), which stays
// pending and unrun.
func TestApproverOfAnotherOrgWithTheSameGrant(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		acme, beta := g.sameSubjectsOrg("acme"), g.sameSubjectsOrg("beta")
		held := map[string]any{"kb:page.read@1": map[string]any{"requiresApproval": true}}
		expect(t, g.installOperatorBiome(acme.alice, held), http.StatusCreated)
		expect(t, g.installOperatorBiome(beta.alice, held), http.StatusCreated)
		h := g.post("/v1/capabilities/invoke", acme.bot, pageRead())
		expect(t, h, http.StatusAccepted)
		id := str(h.Body, "approvalId")
		unknown := g.post("/v1/approvals/apr_aaaaaaaaaaaaaaaa/approve", beta.alice, map[string]any{})
		for _, tok := range []string{beta.alice, beta.bob} {
			r := g.post("/v1/approvals/"+id+"/approve", tok, map[string]any{})
			if r.Status != http.StatusNotFound || str(r.Body, "code") != str(unknown.Body, "code") {
				t.Errorf("beta approving acme's held call: %d %s (unknown id: %d %s)", r.Status, r.Raw, unknown.Status, unknown.Raw)
			}
		}
		list := g.get("/v1/approvals", acme.alice)
		expect(t, list, http.StatusOK)
		if !strings.Contains(string(list.Raw), id) || !strings.Contains(string(list.Raw), `"pending"`) {
			t.Fatalf("acme's held call is no longer pending: %s", list.Raw)
		}
	})
}
