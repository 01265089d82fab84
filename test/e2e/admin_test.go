package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestAdminThroughFunnel submits and approves a biome as an org admin through the same
// funnel agents use, then has an agent call the new capability through the http runner.
func TestAdminThroughFunnel(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		admin := g.adminToken()
		member := g.token("--subject", "user:bob", "--org-role", "org_member", "--env", "org")
		agent := g.token("--subject", "agent:support-bot", "--env", "project")
		prov := newProvider(t)
		dir := biomeDir(t, "ticketing", prov.URL)

		// A non-admin is denied with the structured denial, and nothing is stored.
		den := g.post("/v1/biomes", member, submission(t, dir))
		expect(t, den, http.StatusForbidden)
		if str(den.Body, "decision") != "denied" || str(den.Body, "capability") != "biome:submit-to-store@1" ||
			!strings.HasPrefix(str(den.Body, "auditId"), "deny_") || len(reasonCodes(den.Body)) == 0 {
			t.Fatalf("member submit: %s", den.Raw)
		}

		sub := g.post("/v1/biomes", admin, submission(t, dir))
		expect(t, sub, http.StatusCreated)
		digest, _ := sub.Body["digest"].(map[string]any)
		if !strings.HasPrefix(str(digest, "hash"), "sha256:") || str(digest, "riskTier") != "medium" ||
			digest["domains"] == nil || digest["dataAccess"] == nil || digest["diff"] == nil {
			t.Fatalf("digest: %s", sub.Raw)
		}
		if domains, _ := digest["domains"].(map[string]any); len(domains["ticket"].([]any)) != 3 {
			t.Errorf("digest domains: %v", digest["domains"])
		}
		hash := str(digest, "hash")
		if r := g.post("/v1/biomes", admin, submission(t, dir)); r.Status != http.StatusCreated || str(r.Body, "digest.hash") != hash {
			t.Errorf("resubmitting identical content: %d %s", r.Status, r.Raw)
		}

		// Same version, different content: 409, and the stored digest is unchanged.
		changed := submission(t, dir)
		changed["contributions"].([]json.RawMessage)[0] = json.RawMessage(strings.Replace(
			string(changed["contributions"].([]json.RawMessage)[0]), `"riskTier": "medium"`, `"riskTier": "high"`, 1))
		if r := g.post("/v1/biomes", admin, changed); r.Status != http.StatusConflict || str(r.Body, "code") == "" {
			t.Errorf("same version, other content: %d %s", r.Status, r.Raw)
		}

		grant := func(body map[string]any) response {
			return g.post("/v1/grants", admin, body)
		}
		base := func(extra map[string]any) map[string]any {
			b := map[string]any{"biomeId": "ticketing", "version": "1.0.0", "digestHash": hash}
			for k, v := range extra {
				b[k] = v
			}
			return b
		}
		stale := grant(map[string]any{"biomeId": "ticketing", "version": "1.0.0", "digestHash": "sha256:" + strings.Repeat("0", 64)})
		expect(t, stale, http.StatusConflict)
		if !strings.Contains(string(stale.Raw), "/digestHash") {
			t.Errorf("stale digest answer names no path: %s", stale.Raw)
		}
		for _, tt := range []struct {
			name string
			body map[string]any
			path string
		}{
			{"unknown biome version", map[string]any{"biomeId": "ticketing", "version": "9.9.9", "digestHash": hash}, "/version"},
			{"unknown profile", base(map[string]any{"profile": "god-mode"}), "/profile"},
			{"unknown environment", base(map[string]any{"customize": map[string]any{"ticket:find@1": map[string]any{"environments": []string{"mars"}}}}), "/customize/ticket:find@1/environments/0"},
			{"unknown capability", base(map[string]any{"customize": map[string]any{"kb:page.read@1": map[string]any{"environments": []string{"project"}}}}), "/customize/kb:page.read@1"},
			{"bad glob", base(map[string]any{"customize": map[string]any{"ticket:find@1": map[string]any{"resources": []string{"tickets/[a-"}}}}), "/customize/ticket:find@1/resources/0"},
		} {
			r := grant(tt.body)
			if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Raw), `"`+tt.path+`"`) {
				t.Errorf("%s: %d %s, want 400 naming %s", tt.name, r.Status, r.Raw, tt.path)
			}
		}
		// None of the refused grants published anything: the seeded ref still looks unknown.
		if r := g.post("/v1/capabilities/invoke", agent, map[string]any{"ref": "ticket:find@1", "input": map[string]any{"customerEmail": "a@example.com"}}); r.Status != http.StatusNotFound {
			t.Fatalf("before the grant: %d %s", r.Status, r.Raw)
		}

		ok := grant(base(nil))
		expect(t, ok, http.StatusCreated)
		if str(ok.Body, "grantId") == "" || str(ok.Body, "approvedBy") != "user:alice" || str(ok.Body, "digestHash") != hash ||
			str(ok.Body, "profile") != "internal-agent" || str(ok.Body, "approvedAt") == "" {
			t.Errorf("grant: %s", ok.Raw)
		}

		t.Run("http runner", func(t *testing.T) { testHTTPRunner(t, g, agent, prov) })
		t.Run("biome submit CLI and successor", func(t *testing.T) { testSuccessor(t, g, admin, agent, prov) })
	})
}

func testHTTPRunner(t *testing.T, g *gateway, agent string, prov *provider) {
	input := `{"customerEmail":"ada@example.com"}`
	r := g.post("/v1/capabilities/invoke", agent, `{"ref":"ticket:find@1","input":`+input+`}`)
	expect(t, r, http.StatusOK)
	call := prov.last(t)
	if call.Path != "/find" || string(call.Body) != input || call.Header.Get("Content-Type") != "application/json" {
		t.Errorf("provider got %s %q (%s)", call.Path, call.Body, call.Header.Get("Content-Type"))
	}
	if call.Header.Get("X-Xema-Ref") != "ticket:find@1" || call.Header.Get("X-Xema-Audit-Id") != str(r.Body, "auditId") {
		t.Errorf("provider headers %v, answer %s", call.Header, r.Raw)
	}
	if tok := strings.TrimPrefix(call.Header.Get("Authorization"), "Bearer "); tok == "" || tok == call.Header.Get("Authorization") || tok == agent {
		t.Errorf("provider Authorization %q: want the gateway's own bearer token", call.Header.Get("Authorization"))
	}
	if str(r.Body, "output.ticketId") == "" {
		t.Errorf("output %s", r.Raw)
	}
	rec := g.get("/v1/audit/"+str(r.Body, "auditId"), agent)
	if str(rec.Body, "runner") != "http" || str(rec.Body, "outcome") != "ok" {
		t.Errorf("audit of an http call: %s", rec.Raw)
	}

	for _, mode := range []string{"500", "notjson"} {
		prov.setMode(mode)
		before := prov.count()
		r := g.post("/v1/capabilities/invoke", agent, `{"ref":"ticket:find@1","input":`+input+`}`)
		if r.Status != http.StatusBadGateway || str(r.Body, "code") == "" || str(r.Body, "message") == "" || str(r.Body, "auditId") == "" {
			t.Errorf("provider %s: %d %s, want a typed 502", mode, r.Status, r.Raw)
		}
		if strings.Contains(string(r.Raw), "oops") || strings.Contains(string(r.Raw), `"error":"internal"`) {
			t.Errorf("provider %s: the provider's body leaked: %s", mode, r.Raw)
		}
		if prov.count() != before+1 {
			t.Errorf("provider %s: called %d times", mode, prov.count()-before)
		}
		rec := g.get("/v1/audit/"+str(r.Body, "auditId"), agent)
		expect(t, rec, http.StatusOK)
		if str(rec.Body, "outcome") != str(r.Body, "code") || str(rec.Body, "runner") != "http" {
			t.Errorf("provider %s: audit %s, answer %s", mode, rec.Raw, r.Raw)
		}
	}
	prov.setMode("")
}

func testSuccessor(t *testing.T, g *gateway, admin, agent string, prov *provider) {
	v2 := biomeDir(t, "ticketing-v2", prov.URL)
	out, err := g.run("biome", "submit", v2, "--server", g.URL, "--token", admin)
	if err != nil || !strings.Contains(out, "since 1.0.0: added ticket:find@2; removed none") {
		t.Fatalf("xema biome submit names no diff against 1.0.0: %v\n%s", err, out)
	}
	// The same version again is the same submission; JSON on request.
	out, err = g.run("biome", "submit", v2, "--server", g.URL, "--token", admin, "--format", "json")
	if err != nil {
		t.Fatalf("xema biome submit --format json: %v\n%s", err, out)
	}
	var sub struct {
		Version string `json:"version"`
		Digest  struct {
			Hash string `json:"hash"`
			Diff struct {
				Added []any `json:"added"`
			} `json:"diff"`
		} `json:"digest"`
	}
	if err := json.Unmarshal([]byte(out), &sub); err != nil || sub.Version != "1.1.0" || sub.Digest.Hash == "" {
		t.Fatalf("xema biome submit printed %q (%v)", out, err)
	}
	if !strings.Contains(out, "ticket:find@2") || len(sub.Digest.Diff.Added) != 1 {
		t.Errorf("the diff against 1.0.0 does not add ticket:find@2: %s", out)
	}
	// The CLI refuses a biome that does not lint, before sending anything.
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "biome.json"), []byte(`{"id":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := g.run("biome", "submit", bad, "--server", g.URL, "--token", admin); err == nil {
		t.Errorf("submitting an invalid biome succeeded: %s", out)
	}

	expect(t, g.post("/v1/grants", admin, map[string]any{"biomeId": "ticketing", "version": "1.1.0", "digestHash": sub.Digest.Hash}), http.StatusCreated)

	r := search(t, g, agent, map[string]any{"query": "find"})
	var old map[string]any
	for _, h := range r.Body["capabilities"].([]any) {
		if m := h.(map[string]any); m["ref"] == "ticket:find@1" {
			old = m
		}
	}
	if old == nil || old["deprecated"] != true || old["replacedBy"] != "ticket:find@2" {
		t.Errorf("search does not mark ticket:find@1 deprecated by @2: %s", r.Raw)
	}
	if !slices.Contains(refsOf(r.Body, "capabilities"), "ticket:find@2") {
		t.Errorf("search lacks ticket:find@2: %s", r.Raw)
	}
	d := g.post("/v1/capabilities/describe", agent, map[string]any{"refs": []string{"ticket:find@1", "ticket:find@2"}})
	expect(t, d, http.StatusOK)
	var descs []map[string]any
	if err := json.Unmarshal(d.Raw, &descs); err != nil || len(descs) != 2 || descs[0]["replacedBy"] != "ticket:find@2" || descs[1]["replacedBy"] != nil {
		t.Errorf("describe: %s", d.Raw)
	}
	inv := g.post("/v1/capabilities/invoke", agent, map[string]any{"ref": "ticket:find@2", "input": map[string]any{"customerEmail": "ada@example.com"}})
	expect(t, inv, http.StatusOK)
	if prov.last(t).Path != "/find2" {
		t.Errorf("@2 reached %s", prov.last(t).Path)
	}
}
