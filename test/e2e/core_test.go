package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestCore walks the funnel as the README's user does, on both engines: health, the
// walk-through, audit, strict validation, and the five read-only meta-tools.
func TestCore(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		agent := g.token("--subject", "agent:support-bot", "--env", "project")
		public := g.token("--subject", "agent:support-bot", "--env", "public-session")
		prov := newProvider(t)
		g.install(g.adminToken(), biomeDir(t, "ticketing", prov.URL))

		t.Run("health", func(t *testing.T) {
			expect(t, g.get("/healthz", ""), http.StatusOK)
			r := g.get("/readyz", "")
			expect(t, r, http.StatusOK)
			if str(r.Body, "status") != "ready" {
				t.Errorf("readyz body %s", r.Raw)
			}
		})
		t.Run("walkthrough", func(t *testing.T) { testWalkthrough(t, g, agent, public) })
		t.Run("audit holds no input", func(t *testing.T) { testAuditHoldsNoInput(t, g, agent, public) })
		t.Run("strict validation", func(t *testing.T) { testStrictValidation(t, g, agent, public) })
		t.Run("unknown ref", func(t *testing.T) {
			r := g.post("/v1/capabilities/invoke", agent, map[string]any{"ref": "kb:nothing.here@1", "input": map[string]any{}})
			expect(t, r, http.StatusNotFound)
			if str(r.Body, "code") != "UNKNOWN_CAPABILITY" {
				t.Errorf("body %s", r.Raw)
			}
		})
		t.Run("search", func(t *testing.T) { testSearch(t, g, agent) })
		t.Run("describe", func(t *testing.T) { testDescribe(t, g, agent, public) })
		t.Run("plan", func(t *testing.T) { testPlan(t, g) })
		t.Run("preflight", func(t *testing.T) { testPreflight(t, g, agent, public) })
		t.Run("explain", func(t *testing.T) { testExplain(t, g) })
	})
}

func testWalkthrough(t *testing.T, g *gateway, agent, public string) {
	ok := g.post("/v1/capabilities/invoke", agent, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}})
	expect(t, ok, http.StatusOK)
	if str(ok.Body, "output.title") != "Welcome" || !strings.HasPrefix(str(ok.Body, "auditId"), "inv_") {
		t.Fatalf("invoke answer %s", ok.Raw)
	}
	rec := g.get("/v1/audit/"+str(ok.Body, "auditId"), agent)
	expect(t, rec, http.StatusOK)
	for path, want := range map[string]string{"capability": "kb:page.read@1", "subject.ref": "agent:support-bot",
		"subject.kind": "agent", "environment": "project", "decision": "allowed", "runner": "kernel", "outcome": "ok"} {
		if got := str(rec.Body, path); got != want {
			t.Errorf("audit %s = %q, want %q", path, got, want)
		}
	}
	if str(rec.Body, "policyRevision") == "" || !strings.HasPrefix(str(rec.Body, "inputHash"), "hmac-sha256:") {
		t.Errorf("audit record lacks revision or input hash: %s", rec.Raw)
	}

	den := g.post("/v1/capabilities/invoke", public, map[string]any{"ref": "workflow:run.start@1", "input": map[string]any{"workflowId": "onboarding"}})
	expect(t, den, http.StatusForbidden)
	id := str(den.Body, "auditId")
	if !strings.HasPrefix(id, "deny_") || str(den.Body, "decision") != "denied" || str(den.Body, "code") != "DENIED" ||
		str(den.Body, "capability") != "workflow:run.start@1" || str(den.Body, "environment") != "public-session" ||
		str(den.Body, "subject.ref") != "agent:support-bot" {
		t.Fatalf("denial body %s", den.Raw)
	}
	codes := reasonCodes(den.Body)
	if !slices.Contains(codes, "ENVIRONMENT_NOT_ALLOWED") {
		t.Errorf("denial reasons %v lack ENVIRONMENT_NOT_ALLOWED", codes)
	}
	if _, ok := den.Body["suggestions"].([]any); !ok {
		t.Errorf("denial has no suggestions list: %s", den.Raw)
	}

	why := g.get("/v1/audit/"+id+"/why-denied", public)
	expect(t, why, http.StatusOK)
	if str(why.Body, "auditId") != id || !slices.Equal(reasonCodes(why.Body), codes) {
		t.Errorf("why-denied %s does not match the denial %s", why.Raw, den.Raw)
	}
	recDen := g.get("/v1/audit/"+id, public)
	expect(t, recDen, http.StatusOK)
	if str(recDen.Body, "decision") != "denied" {
		t.Errorf("denial audit record %s", recDen.Raw)
	}
	// Another subject may not read the record: answered like an unknown id.
	expect(t, g.get("/v1/audit/"+id, g.token("--subject", "agent:someone-else", "--env", "public-session")), http.StatusNotFound)
	expect(t, g.get("/v1/audit/"+str(ok.Body, "auditId")+"/why-denied", agent), http.StatusConflict)

	out, err := g.run("why-denied", id, "--server", g.URL, "--token", public)
	if err != nil {
		t.Fatalf("xema why-denied: %v\n%s", err, out)
	}
	for _, want := range []string{"agent:support-bot (agent) was denied workflow:run.start@1 in environment public-session",
		"Why:", "ENVIRONMENT_NOT_ALLOWED: workflow:run.start@1 is not granted in public-session", "What to do next:", "call from environment"} {
		if !strings.Contains(out, want) {
			t.Errorf("why-denied output lacks %q:\n%s", want, out)
		}
	}
}

func reasonCodes(body map[string]any) []string {
	var codes []string
	rs, _ := body["reasons"].([]any)
	for _, r := range rs {
		if m, ok := r.(map[string]any); ok {
			codes = append(codes, m["code"].(string))
		}
	}
	return codes
}

// validTicket is an input of ticket:create@1 that passes its schema.
const validTicket = `{"title":"Printer on fire","priority":"urgent","dueAt":"2026-12-01T09:00:00Z","count":1,` +
	`"reporter":{"email":"ada@example.com","id":"0b5b8d8e-3c1a-4f7e-9d2b-6a0c1e2f3a4b"}`

func testAuditHoldsNoInput(t *testing.T, g *gateway, agent, public string) {
	const secret = "sk-live-9f8e7d6c5b4a39281706"
	input := validTicket + `,"apiKey":"` + secret + `"}`
	sum := sha256.Sum256([]byte(input))
	hashes := map[string]bool{}
	for _, caller := range []struct {
		name, token string
		status      int
	}{{"allowed", agent, http.StatusOK}, {"denied", public, http.StatusForbidden}} {
		r := g.post("/v1/capabilities/invoke", caller.token, `{"ref":"ticket:create@1","input":`+input+`}`)
		expect(t, r, caller.status)
		rec := g.get("/v1/audit/"+str(r.Body, "auditId"), caller.token)
		expect(t, rec, http.StatusOK)
		if strings.Contains(string(rec.Raw), secret) || strings.Contains(string(rec.Raw), "Printer on fire") {
			t.Errorf("%s: the audit record holds raw input: %s", caller.name, rec.Raw)
		}
		// Keyed (the deployment's input-hash key): the unkeyed sha256 of the input, which anyone
		// could recompute from a guess, must not appear; equal inputs still hash equal.
		got := str(rec.Body, "inputHash")
		if !strings.HasPrefix(got, "hmac-sha256:") || strings.Contains(got, hex.EncodeToString(sum[:])) {
			t.Errorf("%s: inputHash %s, want a keyed hmac-sha256", caller.name, got)
		}
		hashes[got] = true
	}
	if len(hashes) != 1 {
		t.Errorf("one input hashed to %d different values: %v", len(hashes), hashes)
	}
}

func testStrictValidation(t *testing.T, g *gateway, agent, public string) {
	invoke := func(token, input string) response {
		return g.post("/v1/capabilities/invoke", token, `{"ref":"ticket:create@1","input":`+input+`}`)
	}
	expect(t, invoke(agent, validTicket+`}`), http.StatusOK)
	tests := []struct {
		name  string
		input string
		paths []string
	}{
		{"type", strings.Replace(validTicket, `"Printer on fire"`, `5`, 1) + `}`, []string{"/title"}},
		{"enum", strings.Replace(validTicket, `"urgent"`, `"medium"`, 1) + `}`, []string{"/priority"}},
		{"date-time", strings.Replace(validTicket, `"2026-12-01T09:00:00Z"`, `"tomorrow"`, 1) + `}`, []string{"/dueAt"}},
		{"email", strings.Replace(validTicket, `"ada@example.com"`, `"ada-at-example"`, 1) + `}`, []string{"/reporter/email"}},
		{"uuid", strings.Replace(validTicket, `"0b5b8d8e-3c1a-4f7e-9d2b-6a0c1e2f3a4b"`, `"not-a-uuid"`, 1) + `}`, []string{"/reporter/id"}},
		{"string for an integer", strings.Replace(validTicket, `"count":1`, `"count":"1"`, 1) + `}`, []string{"/count"}},
		{"unknown property at depth", strings.Replace(validTicket, `"id":`, `"admin":true,"id":`, 1) + `}`, []string{"/reporter/admin"}},
		{"unknown property at the root", validTicket + `,"x":1}`, []string{"/x"}},
		{"every violation at once", `{"title":5,"priority":"medium","dueAt":"tomorrow","count":"1",` +
			`"reporter":{"email":"nope","id":"nope","extra":1}}`,
			[]string{"/count", "/dueAt", "/priority", "/reporter/email", "/reporter/extra", "/reporter/id", "/title"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := invoke(agent, tt.input)
			expect(t, r, http.StatusBadRequest)
			if str(r.Body, "code") != "INVALID_INPUT" {
				t.Fatalf("body %s", r.Raw)
			}
			var paths []string
			vs, _ := r.Body["violations"].([]any)
			for _, v := range vs {
				m := v.(map[string]any)
				if m["message"] == "" {
					t.Errorf("violation without a message: %v", m)
				}
				paths = append(paths, m["path"].(string))
			}
			sort.Strings(paths)
			paths = slices.Compact(paths)
			if !slices.Equal(paths, tt.paths) {
				t.Errorf("violation paths %v, want %v; body %s", paths, tt.paths, r.Raw)
			}
			rec := g.get("/v1/audit/"+str(r.Body, "auditId"), agent)
			expect(t, rec, http.StatusOK)
			if d := str(rec.Body, "decision"); d == "allowed" {
				t.Errorf("an invalid call was recorded as %s", d)
			}
			// A denied caller learns nothing of the schema: the denial, never the violations.
			den := invoke(public, tt.input)
			expect(t, den, http.StatusForbidden)
			if str(den.Body, "code") != "DENIED" || den.Body["violations"] != nil {
				t.Errorf("denied caller got %s", den.Raw)
			}
		})
	}
}

// search posts a search and fails on anything but 200.
func search(t *testing.T, g *gateway, token string, req map[string]any) response {
	t.Helper()
	r := g.post("/v1/capabilities/search", token, req)
	expect(t, r, http.StatusOK)
	return r
}

func testSearch(t *testing.T, g *gateway, agent string) {
	kbOnly := g.token("--subject", "agent:support-bot", "--env", "project", "--armed", "kb:*")
	r := search(t, g, kbOnly, map[string]any{})
	if refs := refsOf(r.Body, "capabilities"); !slices.Equal(refs, []string{"kb:page.publish@1", "kb:page.read@1"}) || r.Body["consideredCount"] != 2.0 {
		t.Errorf("armed kb:* sees %v (considered %v), want only the demo's two kb capabilities", refs, r.Body["consideredCount"])
	}
	outside := g.token("--subject", "agent:support-bot", "--env", "public-session", "--armed", "kb:*")
	r = search(t, g, outside, map[string]any{})
	if refs := refsOf(r.Body, "capabilities"); len(refs) != 0 || r.Body["consideredCount"] != 0.0 {
		t.Errorf("a caller outside the grant's environments sees %v (considered %v)", refs, r.Body["consideredCount"])
	}

	all := refsOf(search(t, g, agent, map[string]any{}).Body, "capabilities")
	for _, want := range []string{"kb:page.read@1", "ticket:create@1", "workflow:run.start@1"} {
		if !slices.Contains(all, want) {
			t.Errorf("agent search %v lacks %s", all, want)
		}
	}
	for _, hidden := range []string{"biome:install@1", "biome:submit-to-store@1"} {
		if slices.Contains(all, hidden) {
			t.Errorf("agent search shows %s, which agents may not invoke", hidden)
		}
	}

	var paged []string
	req := map[string]any{"limit": 1}
	for range len(all) + 1 {
		r := search(t, g, agent, req)
		page := refsOf(r.Body, "capabilities")
		if len(page) != 1 {
			t.Fatalf("page of limit 1 has %v", page)
		}
		paged = append(paged, page...)
		cursor := str(r.Body, "nextCursor")
		if cursor == "" {
			break
		}
		req = map[string]any{"limit": 1, "cursor": cursor}
	}
	if !slices.Equal(paged, all) {
		t.Errorf("paging with limit 1 gave %v, want %v", paged, all)
	}

	first := search(t, g, agent, map[string]any{"limit": 1})
	cursor := str(first.Body, "nextCursor")
	tamper := []byte(cursor)
	tamper[len(tamper)/2] ^= 1
	for name, req := range map[string]map[string]any{
		"forged cursor":           {"limit": 1, "cursor": string(tamper)},
		"garbage cursor":          {"limit": 1, "cursor": "eyJvIjoxfQ"},
		"cursor of another query": {"limit": 1, "query": "ticket", "cursor": cursor},
		"cursor of another limit": {"limit": 2, "cursor": cursor},
	} {
		r := g.post("/v1/capabilities/search", agent, req)
		if r.Status != http.StatusBadRequest || str(r.Body, "code") != "INVALID_CURSOR" {
			t.Errorf("%s: %d %s, want 400 INVALID_CURSOR", name, r.Status, r.Raw)
		}
	}
	// A cursor issued to one caller is refused to another caller with the same query.
	c2 := str(search(t, g, g.token("--subject", "agent:other", "--env", "project"), map[string]any{"limit": 1}).Body, "nextCursor")
	if r := g.post("/v1/capabilities/search", agent, map[string]any{"limit": 1, "cursor": c2}); r.Status != http.StatusBadRequest {
		t.Errorf("another caller's cursor: %d %s", r.Status, r.Raw)
	}

	anchored := search(t, g, agent, map[string]any{"resourceType": "ticket"})
	if str(anchored.Body, "anchor.source") != "argument" || str(anchored.Body, "anchor.resourceType") != "ticket" {
		t.Errorf("anchor %s", anchored.Raw)
	}
	got := refsOf(anchored.Body, "capabilities")
	sort.Strings(got)
	if want := []string{"ticket:comment.add@1", "ticket:create@1", "ticket:find@1"}; !slices.Equal(got, want) {
		t.Errorf("anchored on ticket: %v, want %v", got, want)
	}
	byNoun := search(t, g, agent, map[string]any{"query": "comment on a ticket"})
	if str(byNoun.Body, "anchor.source") != "query" || str(byNoun.Body, "anchor.resourceType") != "ticket" {
		t.Errorf("a resource noun in query did not anchor: %s", byNoun.Raw)
	}
}

func testDescribe(t *testing.T, g *gateway, agent, public string) {
	r := g.post("/v1/capabilities/describe", agent, map[string]any{"refs": []string{"kb:page.read@1", "ticket:create@1"}})
	expect(t, r, http.StatusOK)
	var descs []map[string]any
	if err := json.Unmarshal(r.Raw, &descs); err != nil || len(descs) != 2 {
		t.Fatalf("describe answer %s", r.Raw)
	}
	if descs[0]["ref"] != "kb:page.read@1" || str(descs[0], "biome.id") != "demo" || descs[0]["inputSchema"] == nil ||
		descs[0]["outputSchema"] == nil || descs[0]["sideEffects"] == "" || descs[1]["ref"] != "ticket:create@1" {
		t.Errorf("describe answer %s", r.Raw)
	}
	// For the public caller workflow:run.start@1 is denied: it must look exactly unknown.
	denied := g.post("/v1/capabilities/describe", public, map[string]any{"refs": []string{"workflow:run.start@1"}})
	unknown := g.post("/v1/capabilities/describe", public, map[string]any{"refs": []string{"workflow:run.stopx@1"}})
	if denied.Status != unknown.Status || strings.ReplaceAll(string(denied.Raw), "run.start", "run.stopx") != string(unknown.Raw) {
		t.Errorf("a denied ref is told apart from an unknown one:\n denied  %d %s\n unknown %d %s", denied.Status, denied.Raw, unknown.Status, unknown.Raw)
	}
	refs := make([]string, 51)
	for i := range refs {
		refs[i] = "kb:page.read@1"
	}
	expect(t, g.post("/v1/capabilities/describe", agent, map[string]any{"refs": refs}), http.StatusBadRequest)
	expect(t, g.post("/v1/capabilities/describe", agent, map[string]any{"refs": refs[:50]}), http.StatusOK)
}

func testPlan(t *testing.T, g *gateway) {
	plan := func(token string, from []string) response {
		return g.post("/v1/capabilities/plan", token, map[string]any{"goalCapabilityRef": "ticket:comment.add@1", "fromResourceTypes": from})
	}
	steps := func(r response) []string { return refsOf(r.Body, "steps") }

	viaFind := g.token("--subject", "agent:support-bot", "--env", "project", "--armed", "ticket:find@1", "--armed", "ticket:comment.add@1")
	r := plan(viaFind, []string{})
	expect(t, r, http.StatusOK)
	if r.Body["found"] != true || !slices.Equal(steps(r), []string{"ticket:find@1", "ticket:comment.add@1"}) {
		t.Errorf("plan to comment from nothing: %s", r.Raw)
	}
	// Only steps the caller may invoke: without find, the plan goes through create.
	viaCreate := g.token("--subject", "agent:support-bot", "--env", "project", "--armed", "ticket:create@1", "--armed", "ticket:comment.add@1")
	if r := plan(viaCreate, nil); !slices.Equal(steps(r), []string{"ticket:create@1", "ticket:comment.add@1"}) {
		t.Errorf("plan without find: %s", r.Raw)
	}
	// Holding a ticket already, the goal alone.
	if r := plan(viaFind, []string{"ticket"}); !slices.Equal(steps(r), []string{"ticket:comment.add@1"}) {
		t.Errorf("plan from a ticket: %s", r.Raw)
	}
	goalOnly := g.token("--subject", "agent:support-bot", "--env", "project", "--armed", "ticket:comment.add@1")
	r = plan(goalOnly, nil)
	expect(t, r, http.StatusOK)
	if missing, _ := r.Body["missingResourceTypes"].([]any); r.Body["found"] != false || len(missing) != 1 || missing[0] != "ticket" {
		t.Errorf("plan with no producer: %s", r.Raw)
	}
	expect(t, plan(g.token("--subject", "agent:support-bot", "--env", "project", "--armed", "kb:*"), nil), http.StatusNotFound)
}

func testPreflight(t *testing.T, g *gateway, agent, public string) {
	r := g.post("/v1/capabilities/preflight", agent, map[string]any{"ref": "kb:page.read@1"})
	expect(t, r, http.StatusOK)
	if b, _ := r.Body["blockers"].([]any); r.Body["ready"] != true || len(b) != 0 {
		t.Errorf("granted ref not ready: %s", r.Raw)
	}
	r = g.post("/v1/capabilities/preflight", public, map[string]any{"ref": "workflow:run.start@1"})
	expect(t, r, http.StatusOK)
	if r.Body["ready"] != false || !slices.Contains(codesOf(r.Body["blockers"]), "ENVIRONMENT_NOT_ALLOWED") {
		t.Errorf("denied ref preflight: %s", r.Raw)
	}
}

func codesOf(v any) []string {
	var codes []string
	items, _ := v.([]any)
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			codes = append(codes, m["code"].(string))
		}
	}
	return codes
}

func testExplain(t *testing.T, g *gateway) {
	// A member (not an admin) holds no grant for the admin capability.
	member := g.token("--subject", "user:bob", "--org-role", "org_member", "--env", "org")
	den := g.post("/v1/capabilities/invoke", member, map[string]any{"ref": "biome:install@1",
		"input": map[string]any{"biomeId": "demo", "version": "1.0.0", "digestHash": "x"}})
	expect(t, den, http.StatusForbidden)
	if !slices.Contains(reasonCodes(den.Body), "MISSING_GRANT") {
		t.Fatalf("member denial lacks MISSING_GRANT: %s", den.Raw)
	}
	// The admin capability is held by org role: the member is told the role, not a grant.
	r := g.post("/v1/capabilities/explain", member, map[string]any{"capabilityRef": "biome:install@1", "denialCode": "MISSING_GRANT"})
	expect(t, r, http.StatusOK)
	perms, _ := r.Body["permissions"].([]any)
	if len(perms) != 0 || str(r.Body, "domain") != "biome" || str(r.Body, "biome.id") == "" {
		t.Fatalf("explain: %s", r.Raw)
	}
	if !strings.Contains(string(r.Raw), `"kind":"request-role"`) || !strings.Contains(string(r.Raw), `"role":"org_admin"`) ||
		strings.Contains(string(r.Raw), `"request-grant"`) {
		t.Errorf("explain for a member: want request-role org_admin and no grant: %s", r.Raw)
	}
	if !slices.Contains(codesOf(r.Body["reasons"]), "MISSING_GRANT") {
		t.Errorf("explain reasons: %s", r.Raw)
	}
	// The public caller is told which environment a grant would need.
	public := g.token("--subject", "agent:support-bot", "--env", "public-session")
	r = g.post("/v1/capabilities/explain", public, map[string]any{"capabilityRef": "workflow:run.start@1", "denialCode": "ENVIRONMENT_NOT_ALLOWED"})
	expect(t, r, http.StatusOK)
	if len(r.Body["suggestions"].([]any)) == 0 {
		t.Errorf("explain without suggestions: %s", r.Raw)
	}
}
