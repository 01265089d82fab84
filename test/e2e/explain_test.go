package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const kbDenyRule = `package xema.custom

deny contains {"code": "KB_FROZEN", "detail": "the knowledge base is frozen"} if input.ref == "kb:page.read@1"
`

// TestExplain: explain refuses a code no denial can carry with a 400 naming /denialCode,
// knows the codes of --policy-dir's Rego, and never offers what the caller already holds: no
// grant for a platform denial of a granted call, the org_admin role (not a grant) for a
// member's submit; preflight's blocker reads as a denial.
func TestExplain(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "frozen.rego"), []byte(kbDenyRule), 0o644); err != nil {
			t.Fatal(err)
		}
		g := startGateway(t, e.store(t), "--policy-dir", dir)
		agent := g.token("--subject", "agent:support-bot", "--env", "project")

		r := g.post("/v1/capabilities/explain", agent, map[string]any{"capabilityRef": "kb:page.read@1", "denialCode": "NOPE"})
		expect(t, r, http.StatusBadRequest)
		if !strings.Contains(str(r.Body, "message"), "/denialCode") || !strings.Contains(str(r.Body, "message"), "KB_FROZEN") {
			t.Fatalf("unknown code: %s", r.Raw)
		}

		// A platform denial of a call the agent is granted: no grant to ask for.
		den := g.post("/v1/capabilities/invoke", agent, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}})
		expect(t, den, http.StatusForbidden)
		if codes := reasonCodes(den.Body); !slices.Equal(codes, []string{"KB_FROZEN"}) {
			t.Fatalf("denial reasons %v: %s", codes, den.Raw)
		}
		r = g.post("/v1/capabilities/explain", agent, map[string]any{"capabilityRef": "kb:page.read@1", "denialCode": "KB_FROZEN"})
		expect(t, r, http.StatusOK)
		if perms, _ := r.Body["permissions"].([]any); len(perms) != 0 || strings.Contains(string(r.Raw), "request-grant") {
			t.Fatalf("explain offers a grant the caller holds: %s", r.Raw)
		}
		if !slices.Equal(codesOf(r.Body["reasons"]), []string{"KB_FROZEN"}) {
			t.Fatalf("explain reasons: %s", r.Raw)
		}
		pre := g.post("/v1/capabilities/preflight", agent, map[string]any{"ref": "kb:page.read@1"})
		expect(t, pre, http.StatusOK)
		if strings.Contains(string(pre.Raw), "admits") || !strings.Contains(string(pre.Raw), "the policy denies this caller in project (KB_FROZEN)") {
			t.Fatalf("preflight blocker: %s", pre.Raw)
		}

		// A member denied a submit needs the org_admin role, not a grant.
		member := g.token("--subject", "user:bob", "--org-role", "org_member", "--env", "org")
		expect(t, g.post("/v1/biomes", member, map[string]any{"manifest": map[string]any{}, "contributions": []any{}}), http.StatusForbidden)
		r = g.post("/v1/capabilities/explain", member, map[string]any{"capabilityRef": "biome:submit-to-store@1", "denialCode": "HUMAN_BASELINE_NOT_MET"})
		expect(t, r, http.StatusOK)
		if perms, _ := r.Body["permissions"].([]any); len(perms) != 0 || strings.Contains(string(r.Raw), "request-grant") ||
			!strings.Contains(string(r.Raw), `{"kind":"request-role","capability":"biome:submit-to-store@1","environment":"org","role":"org_admin"}`) {
			t.Fatalf("explain for a member's submit: %s", r.Raw)
		}

		// A caller in an environment the grant does not admit (and whose audience may not
		// receive the output, so no grant there could) is told where the grant admits it,
		// not offered a grant (TestExplanationsAgree has the grant naming a subject).
		other := g.token("--subject", "agent:other", "--env", "public-session")
		r = g.post("/v1/capabilities/explain", other, map[string]any{"capabilityRef": "workflow:run.start@1", "denialCode": "ENVIRONMENT_NOT_ALLOWED"})
		expect(t, r, http.StatusOK)
		if perms, _ := r.Body["permissions"].([]any); len(perms) != 0 || !strings.Contains(string(r.Raw), `"kind":"switch-environment"`) {
			t.Fatalf("explain for a wrong environment: %s", r.Raw)
		}
	})
}

// TestExplainPolicyDirReload: a changed --policy-dir file serves without a restart (and its
// new codes are known to explain); a broken one keeps the serving policy and is logged.
func TestExplainPolicyDirReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "frozen.rego")
	if err := os.WriteFile(file, []byte(kbDenyRule), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "", "--policy-dir", dir, "--policy-dir-poll", "100ms")
	agent := g.token("--subject", "agent:support-bot", "--env", "project")
	call := map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}}
	expect(t, g.post("/v1/capabilities/invoke", agent, call), http.StatusForbidden)

	until := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
			if ok() {
				return
			}
			time.Sleep(50 * time.Millisecond) // polling an observable condition, not a fixed wait
		}
		t.Fatalf("%s: not within 15s; logs:\n%s", what, g.logs.String())
	}
	thawed := strings.ReplaceAll(kbDenyRule, `input.ref == "kb:page.read@1"`, `input.ref == "kb:never@1"`)
	thawed = strings.ReplaceAll(thawed, "KB_FROZEN", "KB_THAWED")
	if err := os.WriteFile(file, []byte(thawed), 0o644); err != nil {
		t.Fatal(err)
	}
	until("the changed rule serves", func() bool { return g.post("/v1/capabilities/invoke", agent, call).Status == http.StatusOK })
	if !strings.Contains(g.logs.String(), "platform policy reloaded") {
		t.Error("the reload was not logged")
	}
	expect(t, g.post("/v1/capabilities/explain", agent, map[string]any{"capabilityRef": "kb:page.read@1", "denialCode": "KB_THAWED"}), http.StatusOK)

	if err := os.WriteFile(file, []byte("package xema.custom\n\ndeny contains {"), 0o644); err != nil {
		t.Fatal(err)
	}
	until("the broken file is logged", func() bool { return strings.Contains(g.logs.String(), "platform policy not reloaded") })
	// Under the path the operator edits, not the bundle's custom/ name.
	if logs := g.logs.String(); !strings.Contains(logs, file+":3:") || strings.Contains(logs, "custom/frozen.rego") {
		t.Errorf("the reload error does not name %s:\n%s", file, logs)
	}
	expect(t, g.post("/v1/capabilities/invoke", agent, call), http.StatusOK)
	expect(t, g.get("/readyz", ""), http.StatusOK)
}

// TestExplanationsAgree: for each denial of issue 25's list, the call's answer (HTTP and
// MCP), why-denied (HTTP and the CLI) and explain (HTTP and MCP) give the same next steps,
// suggestions and permission, all from package explain: a caller the grant does not cover is
// offered the grant naming it; a rate-limited call is told when to retry; an agent posting
// /v1/grants is offered no grant of the kernel's biome; a wrong environment, a member's
// submit and a platform rule each get their own step. The console shows why-denied's steps
// (TestConsole).
func TestExplanationsAgree(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "frozen.rego"), []byte(kbDenyRule), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "", "--policy-dir", dir)
	prov := newProvider(t)
	admin := g.adminToken()
	sub := g.install(admin, biomeDir(t, "ticketing", prov.URL))
	expect(t, g.grantCustomized(admin, sub, map[string]any{
		commentRef:      map[string]any{"subjects": []string{"agent:someone-else"}},
		"ticket:find@1": map[string]any{"rateLimit": map[string]any{"requests": 1, "per": "1h"}},
	}), http.StatusCreated)
	bot := g.token("--subject", "agent:support-bot", "--env", "project")
	public := g.token("--subject", "agent:support-bot", "--env", "public-session")
	member := g.token("--subject", "user:bob", "--org-role", "org_member", "--env", "org")
	expect(t, g.post("/v1/capabilities/invoke", bot, findCall()), http.StatusOK)

	type denial struct {
		name, token, code string
		call              func() response
		// next must be among the steps; grant: the permission's subject ("" none).
		next, grant string
	}
	invoke := func(token string, body any) func() response {
		return func() response { return g.post("/v1/capabilities/invoke", token, body) }
	}
	cases := []denial{
		{"subject not covered", bot, "SUBJECT_NOT_COVERED", invoke(bot, commentCall()),
			"ask an org admin to grant " + commentRef + " to agent:support-bot in environment project", "agent:support-bot"},
		{"rate limited", bot, "RATE_LIMITED", invoke(bot, findCall()), "wait, then retry: rate limit for ticket:find@1 exceeded; retry after ", ""},
		{"an agent posting /v1/grants", bot, "MISSING_GRANT", func() response {
			return g.grantCustomized(bot, sub, map[string]any{})
		}, "No grant, role or change of environment would allow this call.", ""},
		{"wrong environment", public, "ENVIRONMENT_NOT_ALLOWED", invoke(public, map[string]any{"ref": "workflow:run.start@1", "input": map[string]any{"workflowId": "onboarding"}}),
			"call from environment app instead of public-session", ""},
		{"a member's submit", member, "HUMAN_BASELINE_NOT_MET", func() response {
			return g.post("/v1/biomes", member, map[string]any{"manifest": map[string]any{}, "contributions": []any{}})
		}, "ask for org role org_admin (it holds biome:submit-to-store@1 without a grant)", ""},
		{"a platform rule", bot, "KB_FROZEN", invoke(bot, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}}),
			"No grant, role or change of environment would allow this call.", ""},
	}
	strs := func(v any) []string {
		var out []string
		for _, x := range asList(v) {
			s, _ := x.(string)
			out = append(out, s)
		}
		return out
	}
	canon := func(v any) string { raw, _ := json.Marshal(v); return string(raw) }
	hasStep := func(steps []string, want string) bool {
		return slices.ContainsFunc(steps, func(s string) bool { return strings.HasPrefix(s, want) })
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			den := c.call()
			if den.Status != http.StatusForbidden && den.Status != http.StatusTooManyRequests {
				t.Fatalf("want a denial: %d %s", den.Status, den.Raw)
			}
			if !slices.Contains(reasonCodes(den.Body), c.code) {
				t.Fatalf("the denial lacks %s: %s", c.code, den.Raw)
			}
			next := strs(den.Body["next"])
			if !hasStep(next, c.next) {
				t.Fatalf("the denial's next steps %q lack %q", next, c.next)
			}
			perms := asList(den.Body["permissions"])
			if (c.grant == "") != (len(perms) == 0) || (c.grant != "" && !slices.Equal(strs(perms[0].(map[string]any)["subjects"]), []string{c.grant})) {
				t.Fatalf("the denial's permissions %s, want one naming %q", canon(perms), c.grant)
			}
			for _, s := range asList(den.Body["suggestions"]) {
				if s.(map[string]any)["kind"] == "request-grant" && c.grant == "" {
					t.Errorf("a grant suggested where none can lift the denial: %s", den.Raw)
				}
			}

			// why-denied (HTTP): the same explanation.
			why := g.get("/v1/audit/"+str(den.Body, "auditId")+"/why-denied", c.token)
			expect(t, why, http.StatusOK)
			for _, k := range []string{"next", "permissions", "suggestions", "reasons"} {
				if canon(why.Body[k]) != canon(den.Body[k]) {
					t.Errorf("why-denied's %s %s differs from the denial's %s", k, canon(why.Body[k]), canon(den.Body[k]))
				}
			}
			// why-denied (CLI): prints those steps.
			out, err := g.run("why-denied", str(den.Body, "auditId"), "--server", g.URL, "--token", c.token)
			if err != nil {
				t.Fatalf("xema why-denied: %v\n%s", err, out)
			}
			for _, s := range next {
				if !strings.Contains(out, s) {
					t.Errorf("xema why-denied lacks the step %q:\n%s", s, out)
				}
			}

			// explain (HTTP and MCP), asked about the code now.
			ask := map[string]any{"capabilityRef": str(den.Body, "capability"), "denialCode": c.code}
			ex := g.post("/v1/capabilities/explain", c.token, ask)
			expect(t, ex, http.StatusOK)
			s, err := mcpSession(t, g, c.token)
			if err != nil {
				t.Fatal(err)
			}
			viaMCP, isErr := callTool(t, s, "xema_capabilities_explain", ask)
			if isErr || canon(viaMCP) != canon(ex.Body) {
				t.Errorf("explain over MCP %s differs from HTTP %s", canon(viaMCP), ex.Raw)
			}
			if c.code == "RATE_LIMITED" {
				// Live, the caller is not over the limit by this question: the limit's window.
				if !hasStep(strs(ex.Body["next"]), "wait, then retry: the rate-limit admits 1 calls per 1h") {
					t.Errorf("explain of RATE_LIMITED: %s", ex.Raw)
				}
				return
			}
			for _, k := range []string{"next", "permissions", "suggestions"} {
				if canon(ex.Body[k]) != canon(den.Body[k]) {
					t.Errorf("explain's %s %s differs from the denial's %s", k, canon(ex.Body[k]), canon(den.Body[k]))
				}
			}
		})
	}
	// The call's answer over MCP is the HTTP one's explanation.
	s, err := mcpSession(t, g, bot)
	if err != nil {
		t.Fatal(err)
	}
	viaMCP, isErr := callTool(t, s, "xema_capabilities_invoke", commentCall())
	if !isErr || !hasStep(strs(viaMCP["next"]), cases[0].next) || len(asList(viaMCP["permissions"])) != 1 {
		t.Errorf("the MCP denial: %s", canon(viaMCP))
	}
}

func asList(v any) []any { l, _ := v.([]any); return l }
