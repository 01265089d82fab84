package e2e

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestOverviewAPI: what the console's overview, capability pages, header and audit default
// read, through the API: GET /v1/stats, GET /v1/catalog/{ref}, GET /v1/me,
// GET /v1/audit?omit=people-reads and the built-in biome's escaped link, each with its bad
// inputs, its denial for an agent and another org's view.
func TestOverviewAPI(t *testing.T) {
	g := startGateway(t, "")
	admin := g.adminToken()
	bot := g.token("--subject", "agent:support-bot", "--env", "project")
	acme := g.token("--subject", "user:bob", "--org-role", "org_admin", "--env", "org", "--org", "acme")
	for range 2 {
		expect(t, g.post("/v1/capabilities/invoke", bot, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}}), http.StatusOK)
	}

	t.Run("stats", func(t *testing.T) {
		st := g.get("/v1/stats?window=1h", admin)
		expect(t, st, http.StatusOK)
		totals, _ := st.Body["totals"].(map[string]any)
		if totals["allowed"] != 2.0 || totals["calls"] != 2.0 || str(st.Body, "omit") != "people-reads" {
			t.Errorf("stats: %s", st.Raw)
		}
		if series, _ := st.Body["series"].([]any); len(series) != 60 {
			t.Errorf("1h has %d buckets, want 60", len(series))
		}
		if series, _ := g.get("/v1/stats", admin).Body["series"].([]any); len(series) != 96 {
			t.Errorf("the default window (24h) has %d buckets, want 96", len(series))
		}
		// Another org's administrator counts only their org's calls.
		other := g.get("/v1/stats?window=7d", acme)
		expect(t, other, http.StatusOK)
		if ot, _ := other.Body["totals"].(map[string]any); ot["calls"] != 0.0 {
			t.Errorf("acme's stats count another org's calls: %s", other.Raw)
		}
		// An agent may not read the org's figures: a denial, audited.
		den := g.get("/v1/stats?window=1h", bot)
		if den.Status != http.StatusForbidden || str(den.Body, "auditId") == "" {
			t.Errorf("an agent's stats: %d %s", den.Status, den.Raw)
		}
		for _, q := range []string{"window=2d", "window=1h&window=7d", "since=1h", "window="} {
			if r := g.get("/v1/stats?"+q, admin); r.Status != http.StatusBadRequest {
				t.Errorf("GET /v1/stats?%s = %d %s, want 400", q, r.Status, r.Raw)
			}
		}
	})

	t.Run("capability", func(t *testing.T) {
		c := g.get("/v1/catalog/"+url.PathEscape("kb:page.read@1"), admin)
		expect(t, c, http.StatusOK)
		grants, _ := c.Body["grants"].([]any)
		if len(grants) != 1 || str(grants[0].(map[string]any), "profile") == "" || str(c.Body, "lifecycle") != "published" {
			t.Errorf("kb:page.read@1: %s", c.Raw)
		}
		// The same ref, unescaped, is the same page.
		if r := g.get("/v1/catalog/kb:page.read@1", admin); r.Status != http.StatusOK {
			t.Errorf("unescaped ref: %d %s", r.Status, r.Raw)
		}
		// Another org sees the operator's capability but none of this org's grants.
		if r := g.get("/v1/catalog/kb:page.read@1", acme); r.Status != http.StatusOK || strings.Contains(string(r.Raw), "grantId") {
			t.Errorf("acme's view of kb:page.read@1 names a grant: %d %s", r.Status, r.Raw)
		}
		if r := g.get("/v1/catalog/kb:nothing.here@1", admin); r.Status != http.StatusNotFound {
			t.Errorf("unknown ref: %d %s", r.Status, r.Raw)
		}
		if r := g.get("/v1/catalog/kb:page.read@1", bot); r.Status != http.StatusForbidden {
			t.Errorf("an agent reads who may call a capability: %d %s", r.Status, r.Raw)
		}
	})

	t.Run("me", func(t *testing.T) {
		me := g.get("/v1/me", acme)
		expect(t, me, http.StatusOK)
		if str(me.Body, "org") != "acme" || str(me.Body, "subject.ref") != "user:bob" || !strings.Contains(string(me.Raw), "audit:stats.get@1") {
			t.Errorf("acme admin: %s", me.Raw)
		}
		agent := g.get("/v1/me", bot)
		if str(agent.Body, "org") != "default" || strings.Contains(string(agent.Raw), "approval:list@1") || strings.Contains(string(agent.Raw), "audit:stats.get@1") {
			t.Errorf("agent: %s", agent.Raw)
		}
		if r := g.get("/v1/me", ""); r.Status != http.StatusUnauthorized {
			t.Errorf("no token: %d", r.Status)
		}
	})

	t.Run("built-in biome link", func(t *testing.T) {
		list := g.get("/v1/biomes", admin)
		expect(t, list, http.StatusOK)
		var version string
		n := 0
		for _, b := range list.Body["biomes"].([]any) {
			m := b.(map[string]any)
			if m["biomeId"] == "xema" {
				n++
				version = str(m, "version")
				if m["builtIn"] != true {
					t.Errorf("the built-in biome is not marked: %v", m)
				}
			}
		}
		if n != 1 || !strings.Contains(version, "+") {
			t.Fatalf("%d rows of the built-in biome (%q)", n, version)
		}
		// What a browser sends for the + of the version (encodeURIComponent): %2B.
		r := g.get("/v1/biomes/xema/"+strings.ReplaceAll(version, "+", "%2B"), admin)
		if r.Status != http.StatusOK || str(r.Body, "version") != version {
			t.Errorf("GET the built-in biome by its escaped link: %d %s", r.Status, r.Raw)
		}
	})

	t.Run("audit omits people's reads", func(t *testing.T) {
		expect(t, g.get("/v1/biomes", admin), http.StatusOK) // a person's read: store:biome.list@1
		all := auditRecords(t, g, admin, url.Values{"ref": {"store:biome.list@1"}})
		kept := auditRecords(t, g, admin, url.Values{"ref": {"store:biome.list@1"}, "omit": {"people-reads"}})
		if len(all) == 0 || len(kept) != 0 {
			t.Errorf("store:biome.list@1 by a person: %d records, %d with omit=people-reads (want some, then none)", len(all), len(kept))
		}
		calls := auditRecords(t, g, admin, url.Values{"ref": {"kb:page.read@1"}, "omit": {"people-reads"}})
		if len(calls) < 2 {
			t.Errorf("the agent's calls are left out: %d", len(calls))
		}
		// A person's denial stays.
		expect(t, g.get("/v1/stats", g.token("--subject", "user:carol", "--env", "org")), http.StatusForbidden)
		denied := auditRecords(t, g, admin, url.Values{"subject": {"user:carol"}, "omit": {"people-reads"}})
		if len(denied) != 1 || denied[0]["decision"] != "denied" {
			t.Errorf("a person's denial with omit=people-reads: %v", denied)
		}
		if r := g.get("/v1/audit?omit=everything", admin); r.Status != http.StatusBadRequest {
			t.Errorf("omit=everything: %d %s", r.Status, r.Raw)
		}
	})
}
