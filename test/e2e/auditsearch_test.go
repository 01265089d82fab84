package e2e

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// auditIDs are the auditIds of a GET /v1/audit page, in order.
func auditIDs(r response) []string {
	var out []string
	recs, _ := r.Body["records"].([]any)
	for _, rec := range recs {
		if m, ok := rec.(map[string]any); ok {
			out = append(out, str(m, "auditId"))
		}
	}
	return out
}

// TestAuditSearch: GET /v1/audit is org-scoped (admins read their org's records, others only
// their own), newest first, filtered, paginated by a signed cursor bound to the query and
// caller, and names the bad parameter; `xema audit search` is its twin.
func TestAuditSearch(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		admin := g.adminToken()
		agent := g.token("--subject", "agent:support-bot", "--env", "project")
		public := g.token("--subject", "agent:support-bot", "--env", "public-session")
		other := g.token("--subject", "agent:other-bot", "--env", "project")
		globex := g.token("--subject", "user:carol", "--org-role", "org_admin", "--env", "org", "--org", "globex")
		start := time.Now().UTC().Add(-time.Second)

		var allowed []string
		for range 3 {
			ok := g.post("/v1/capabilities/invoke", agent, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}})
			expect(t, ok, http.StatusOK)
			allowed = append(allowed, str(ok.Body, "auditId"))
		}
		den := g.post("/v1/capabilities/invoke", public, map[string]any{"ref": "workflow:run.start@1", "input": map[string]any{"workflowId": "onboarding"}})
		expect(t, den, http.StatusForbidden)
		denied := str(den.Body, "auditId")
		expect(t, g.post("/v1/capabilities/invoke", other, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}}), http.StatusOK)
		expect(t, g.post("/v1/capabilities/invoke", globex, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}}), http.StatusForbidden)

		// The denial by ref, as an admin finds it; newest first; why-denied from there.
		r := g.get("/v1/audit?ref=workflow:run.start@1&decision=denied", admin)
		expect(t, r, http.StatusOK)
		if ids := auditIDs(r); len(ids) != 1 || ids[0] != denied {
			t.Fatalf("denials of workflow:run.start@1 = %v, want [%s]: %s", ids, denied, r.Raw)
		}
		expect(t, g.get("/v1/audit/"+denied+"/why-denied", admin), http.StatusOK)
		r = g.get("/v1/audit?reason=ENVIRONMENT_NOT_ALLOWED", admin)
		expect(t, r, http.StatusOK)
		if !slices.Contains(auditIDs(r), denied) {
			t.Fatalf("reason filter lacks %s: %s", denied, r.Raw)
		}

		// Allowed calls of the agent: the decision records, newest first (the outcome
		// records, linked by parentAuditId, are in the log too).
		r = g.get("/v1/audit?subject=agent:support-bot&decision=allowed&ref=kb:page.read@1", admin)
		expect(t, r, http.StatusOK)
		var decisions []string
		for _, id := range auditIDs(r) {
			if !strings.HasSuffix(id, ".outcome") {
				decisions = append(decisions, id)
			}
		}
		if want := []string{allowed[2], allowed[1], allowed[0]}; !slices.Equal(decisions, want) {
			t.Fatalf("allowed decisions = %v, want newest first %v", decisions, want)
		}

		// Pages of 2 over every record of the agent's allowed calls: no repeat, no gap.
		var paged []string
		q := url.Values{"subject": {"agent:support-bot"}, "decision": {"allowed"}, "limit": {"2"}}
		for i := 0; ; i++ {
			if i > 10 {
				t.Fatal("pagination does not end")
			}
			r := g.get("/v1/audit?"+q.Encode(), admin)
			expect(t, r, http.StatusOK)
			paged = append(paged, auditIDs(r)...)
			next := str(r.Body, "nextCursor")
			if next == "" {
				break
			}
			// A cursor is bound to its query and its caller.
			expect(t, g.get("/v1/audit?subject=agent:support-bot&limit=2&cursor="+url.QueryEscape(next), admin), http.StatusBadRequest)
			expect(t, g.get("/v1/audit?"+q.Encode()+"&cursor="+url.QueryEscape(next[:len(next)-2]+"AA"), admin), http.StatusBadRequest)
			q.Set("cursor", next)
		}
		full := g.get("/v1/audit?subject=agent:support-bot&decision=allowed&limit=100", admin)
		if !slices.Equal(paged, auditIDs(full)) || len(paged) < 6 {
			t.Fatalf("paged %v, want %v (decision and outcome of 3 calls)", paged, auditIDs(full))
		}

		// Not an admin: only one's own records, whatever the filter says.
		r = g.get("/v1/audit?limit=100", other)
		expect(t, r, http.StatusOK)
		if len(auditIDs(r)) == 0 {
			t.Fatal("a subject does not see its own records")
		}
		for _, rec := range r.Body["records"].([]any) {
			if s := str(rec.(map[string]any), "subject.ref"); s != "agent:other-bot" {
				t.Fatalf("agent:other-bot reads a record of %s", s)
			}
		}
		r = g.get("/v1/audit?subject=agent:support-bot", other)
		expect(t, r, http.StatusOK)
		if len(auditIDs(r)) != 0 {
			t.Fatalf("agent:other-bot reads agent:support-bot's records: %s", r.Raw)
		}
		// Another org's admin sees none of default's records, and default's admin none of globex's.
		r = g.get("/v1/audit?limit=100", globex)
		expect(t, r, http.StatusOK)
		for _, id := range auditIDs(r) {
			if slices.Contains(allowed, id) || id == denied {
				t.Fatalf("globex's admin reads default's record %s", id)
			}
		}
		if len(auditIDs(r)) == 0 {
			t.Fatal("globex's admin does not see globex's own denial (the check above read nothing)")
		}
		// A subject of globex with the ref of default's agent reads none of the agent's records.
		twin := g.token("--subject", "agent:support-bot", "--env", "project", "--org", "globex")
		for _, q := range []string{"limit=100", "subject=agent:support-bot&limit=100"} {
			r = g.get("/v1/audit?"+q, twin)
			expect(t, r, http.StatusOK)
			if ids := auditIDs(r); len(ids) != 0 {
				t.Fatalf("globex's agent:support-bot reads default's agent:support-bot records (?%s): %v", q, ids)
			}
		}
		// Nor does a cursor of default's admin open for globex's admin, for the same query.
		first := g.get("/v1/audit?limit=1", admin)
		expect(t, first, http.StatusOK)
		if next := str(first.Body, "nextCursor"); next == "" {
			t.Fatal("default's admin has one page only")
		} else {
			expect(t, g.get("/v1/audit?limit=1&cursor="+url.QueryEscape(next), globex), http.StatusBadRequest)
		}
		r = g.get("/v1/audit?subject=user:carol", admin)
		expect(t, r, http.StatusOK)
		if len(auditIDs(r)) != 0 {
			t.Fatalf("default's admin reads globex's records: %s", r.Raw)
		}

		// Time range.
		r = g.get("/v1/audit?since="+url.QueryEscape(start.Format(time.RFC3339Nano))+"&until="+url.QueryEscape(time.Now().UTC().Add(time.Minute).Format(time.RFC3339)), admin)
		expect(t, r, http.StatusOK)
		if !slices.Contains(auditIDs(r), denied) {
			t.Fatalf("time range lacks %s", denied)
		}
		r = g.get("/v1/audit?until="+url.QueryEscape(start.Format(time.RFC3339Nano)), admin)
		expect(t, r, http.StatusOK)
		if slices.Contains(auditIDs(r), denied) {
			t.Fatalf("until before the call still has %s", denied)
		}

		// Bad parameters: 400 naming the parameter.
		for q, name := range map[string]string{
			"limit=0": "limit", "limit=101": "limit", "limit=x": "limit", "since=yesterday": "since",
			"until=2026-13-01": "until", "decision=deny": "decision", "cursor=garbage": "cursor",
			"color=red": "color", "ref=a&ref=b": "ref", "ref=a%00b": "ref", "subject=%FF": "subject",
			"since=2026-03-02T00:00:00Z&until=2026-03-01T00:00:00Z": "until",
		} {
			r := g.get("/v1/audit?"+q, admin)
			expect(t, r, http.StatusBadRequest)
			if !strings.Contains(str(r.Body, "message"), name) {
				t.Errorf("?%s: message %q does not name %s", q, str(r.Body, "message"), name)
			}
		}
		expect(t, g.get("/v1/audit", ""), http.StatusUnauthorized)

		// The CLI twin.
		out, err := g.run("audit", "search", "--server", g.URL, "--token", admin, "--ref", "workflow:run.start@1", "--decision", "denied")
		if err != nil || !strings.Contains(out, denied) || !strings.Contains(out, "DECISION") {
			t.Fatalf("xema audit search: %v\n%s", err, out)
		}
		out, err = g.run("audit", "search", "--server", g.URL, "--token", admin, "--limit", "0x")
		if err == nil {
			t.Fatalf("xema audit search --limit 0x succeeded:\n%s", out)
		}
		out, err = g.run("audit", "search", "--server", g.URL, "--token", admin, "--decision", "deny")
		if err == nil || !strings.Contains(out, "decision") {
			t.Fatalf("xema audit search --decision deny: %v\n%s", err, out)
		}
	})
}

// TestGrantAndBiomeCLI: `xema biome list`, `xema grant create` (digest read from the
// gateway, customization from flags) and `xema grant list`.
func TestGrantAndBiomeCLI(t *testing.T) {
	g := startGateway(t, "")
	admin := g.adminToken()
	prov := newProvider(t)
	sub := g.post("/v1/biomes", admin, submission(t, biomeDir(t, "ticketing", prov.URL)))
	expect(t, sub, http.StatusCreated)
	out, err := g.run("biome", "list", "--server", g.URL, "--token", admin)
	if err != nil || !strings.Contains(out, "ticketing") || !strings.Contains(out, str(sub.Body, "digest.hash")) {
		t.Fatalf("xema biome list: %v\n%s", err, out)
	}
	out, err = g.run("grant", "create", "--server", g.URL, "--token", admin, "--biome", "ticketing", "--version", "1.0.0",
		"--env", commentRef+"=project", "--subject", commentRef+"=agent:support-bot", "--rate", commentRef+"=5/1m",
		"--require-approval", commentRef)
	if err != nil || !strings.Contains(out, "grant ") {
		t.Fatalf("xema grant create: %v\n%s", err, out)
	}
	out, err = g.run("grant", "list", "--server", g.URL, "--token", admin, "--format", "json")
	if err != nil || !strings.Contains(out, `"requiresApproval": true`) || !strings.Contains(out, `"agent:support-bot"`) {
		t.Fatalf("xema grant list: %v\n%s", err, out)
	}
	bot := g.token("--subject", "agent:support-bot", "--env", "project")
	expect(t, g.post("/v1/capabilities/invoke", bot, commentCall()), http.StatusAccepted)
	out, err = g.run("grant", "create", "--server", g.URL, "--token", admin, "--biome", "ticketing", "--version", "1.0.0", "--rate", commentRef+"=lots")
	if err == nil || !strings.Contains(out, "--rate") {
		t.Fatalf("xema grant create --rate lots: %v\n%s", err, out)
	}
}
