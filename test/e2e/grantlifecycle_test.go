package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/testpg"
)

// activeGrant answers the id of the org's active grant of biome (the test fails without one).
func (g *gateway) activeGrant(admin, biome string) string {
	g.t.Helper()
	r := g.get("/v1/grants?biomeId="+biome, admin)
	expect(g.t, r, http.StatusOK)
	for _, it := range r.Body["grants"].([]any) {
		if m := it.(map[string]any); m["status"] == "active" {
			return m["grantId"].(string)
		}
	}
	g.t.Fatalf("no active grant of %s: %s", biome, r.Raw)
	return ""
}

// grantsByID answers the org's grants of biome by id.
func (g *gateway) grantsByID(admin, biome string) map[string]map[string]any {
	g.t.Helper()
	r := g.get("/v1/grants?biomeId="+biome, admin)
	expect(g.t, r, http.StatusOK)
	out := map[string]map[string]any{}
	for _, it := range r.Body["grants"].([]any) {
		m := it.(map[string]any)
		out[m["grantId"].(string)] = m
	}
	return out
}

func (g *gateway) revoke(token, id string) response {
	g.t.Helper()
	return g.do(mustReq(g.t, http.MethodDelete, g.URL+"/v1/grants/"+id, token))
}

// A grant's lifecycle through the API: a change shows its diff and impact before it is
// recorded, then supersedes the grant; a revoke ends the grant (the superseded one does not
// come back); both are org-scoped, refused on a grant that is not active, audited, and listed
// with who and when.
func TestGrantLifecycle(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		prov := newProvider(t)
		admin := g.adminToken()
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		other := g.token("--subject", "agent:other-bot", "--env", "project")
		g.install(admin, biomeDir(t, "ticketing", prov.URL))
		first := g.activeGrant(admin, "ticketing")
		expect(t, g.post("/v1/capabilities/invoke", bot, commentCall()), http.StatusOK)

		narrow := map[string]any{"customize": map[string]any{commentRef: map[string]any{"subjects": []string{"agent:support-bot"}}}}
		dry := g.post("/v1/grants/"+first+"/change?dryRun=true&since=1h", admin, narrow)
		expect(t, dry, http.StatusOK)
		diff, _ := dry.Body["diff"].([]any)
		if len(diff) != 1 || str(diff[0].(map[string]any), "path") != "/customize/ticket:comment.add@1/subjects" ||
			dry.Body["dryRun"] != true || str(dry.Body, "replaces.grantId") != first || str(dry.Body, "grant.status") != "proposed" {
			t.Fatalf("dry run of the change: %s", dry.Raw)
		}
		if imp, _ := dry.Body["impact"].(map[string]any); imp == nil || imp["considered"].(float64) < 1 {
			t.Fatalf("dry run's impact considers no recorded call: %s", dry.Raw)
		}
		if gs := g.grantsByID(admin, "ticketing"); len(gs) != 1 {
			t.Fatalf("a dry run recorded a grant: %v", gs)
		}

		changed := g.post("/v1/grants/"+first+"/change", admin, narrow)
		expect(t, changed, http.StatusCreated)
		second := str(changed.Body, "grant.grantId")
		if str(changed.Body, "grant.supersedes") != first || str(changed.Body, "replaces.status") != "superseded" {
			t.Fatalf("change answer: %s", changed.Raw)
		}
		expect(t, g.post("/v1/capabilities/invoke", bot, commentCall()), http.StatusOK)
		expect(t, g.post("/v1/capabilities/invoke", other, commentCall()), http.StatusForbidden)
		gs := g.grantsByID(admin, "ticketing")
		if gs[first]["status"] != "superseded" || gs[first]["supersededBy"] != second || gs[second]["status"] != "active" {
			t.Fatalf("listing after the change: %v", gs)
		}

		for _, tc := range []struct {
			name   string
			r      response
			status int
			code   string
		}{
			{"change a superseded grant", g.post("/v1/grants/"+first+"/change", admin, narrow), http.StatusConflict, "GRANT_NOT_ACTIVE"},
			{"change to the same", g.post("/v1/grants/"+second+"/change?dryRun=true", admin, narrow), http.StatusBadRequest, "GRANT_UNCHANGED"},
			{"change to an unknown profile", g.post("/v1/grants/"+second+"/change", admin, map[string]any{"profile": "everything"}), http.StatusBadRequest, ""},
			{"change naming the grant in the body", g.post("/v1/grants/"+second+"/change", admin, map[string]any{"grantId": first}), http.StatusBadRequest, "INVALID_REQUEST"},
			{"change with a body of null", g.post("/v1/grants/"+second+"/change", admin, "null"), http.StatusBadRequest, "INVALID_REQUEST"},
			{"change with an unknown field", g.post("/v1/grants/"+second+"/change", admin, map[string]any{"color": "red"}), http.StatusBadRequest, ""},
			{"revoke a superseded grant", g.revoke(admin, first), http.StatusConflict, "GRANT_NOT_ACTIVE"},
			{"revoke an unknown grant", g.revoke(admin, "grant-nope"), http.StatusNotFound, "GRANT_NOT_FOUND"},
			{"revoke by an agent", g.revoke(bot, second), http.StatusForbidden, ""},
			{"revoke by another org's admin", g.revoke(g.token("--subject", "user:eve", "--org-role", "org_admin", "--env", "org", "--org", "globex"), second), http.StatusNotFound, "GRANT_NOT_FOUND"},
			{"change by another org's admin", g.post("/v1/grants/"+second+"/change", g.token("--subject", "user:eve", "--org-role", "org_admin", "--env", "org", "--org", "globex"), map[string]any{"profile": "internal-agent"}), http.StatusNotFound, "GRANT_NOT_FOUND"},
		} {
			if tc.r.Status != tc.status || tc.code != "" && str(tc.r.Body, "code") != tc.code {
				t.Errorf("%s: %d %s, want %d %s", tc.name, tc.r.Status, tc.r.Raw, tc.status, tc.code)
			}
		}
		if gs := g.grantsByID(admin, "ticketing"); len(gs) != 2 || gs[second]["status"] != "active" {
			t.Fatalf("refused moves changed the grants: %v", gs)
		}

		rev := g.revoke(admin, second)
		expect(t, rev, http.StatusOK)
		if str(rev.Body, "status") != "revoked" || str(rev.Body, "revokedBy") != "user:alice" || str(rev.Body, "revokedAt") == "" {
			t.Fatalf("revoke answer: %s", rev.Raw)
		}
		// The superseded first grant (which admitted every subject) does not come back.
		for _, tok := range []string{bot, other} {
			r := g.post("/v1/capabilities/invoke", tok, commentCall())
			if r.Status != http.StatusForbidden || !strings.Contains(string(r.Raw), "MISSING_GRANT") {
				t.Fatalf("call after the revoke: %d %s, want 403 MISSING_GRANT", r.Status, r.Raw)
			}
		}
		again := g.revoke(admin, second)
		if again.Status != http.StatusConflict || str(again.Body, "code") != "GRANT_NOT_ACTIVE" || !strings.Contains(str(again.Body, "message"), "revoked by user:alice") {
			t.Fatalf("second revoke: %d %s", again.Status, again.Raw)
		}
		gs = g.grantsByID(admin, "ticketing")
		if gs[second]["status"] != "revoked" || gs[second]["revokedBy"] != "user:alice" || gs[second]["revokedAt"] == nil || gs[first]["status"] != "superseded" {
			t.Fatalf("listing after the revoke: %v", gs)
		}
		// Both moves are kernel capabilities: audited like every call, with their decision.
		for _, ref := range []string{"biome:grant.change@1", "biome:grant.revoke@1"} {
			a := g.get("/v1/audit?ref="+ref+"&decision=allowed", admin)
			expect(t, a, http.StatusOK)
			if !strings.Contains(string(a.Raw), `"ref":"user:alice"},"environment":"org","decision":"allowed"`) || !strings.Contains(string(a.Raw), `"outcome":"ok"`) {
				t.Fatalf("no allowed audit record of %s by user:alice: %s", ref, a.Raw)
			}
		}
		denied := g.get("/v1/audit?ref=biome:grant.revoke@1&decision=denied", admin)
		if !strings.Contains(string(denied.Raw), "agent:support-bot") {
			t.Fatalf("the agent's refused revoke is not audited: %s", denied.Raw)
		}

		// A new grant after the revoke is active again; the CLI shows a change before recording it.
		expect(t, g.post("/v1/grants", admin, map[string]any{"biomeId": "ticketing", "version": "1.0.0", "digestHash": g.digestOf(admin, "ticketing", "1.0.0")}), http.StatusCreated)
		third := g.activeGrant(admin, "ticketing")
		cli := []string{"--server", g.URL, "--token", admin}
		out, err := g.run(append([]string{"grant", "change", third, "--subject", commentRef + "=agent:other-bot"}, cli...)...)
		if err != nil || !strings.Contains(out, "/customize/ticket:comment.add@1/subjects: (none) -> [\"agent:other-bot\"]") || !strings.Contains(out, "nothing recorded") {
			t.Fatalf("xema grant change (preview): %v\n%s", err, out)
		}
		if g.activeGrant(admin, "ticketing") != third {
			t.Fatal("xema grant change without --yes recorded the change")
		}
		out, err = g.run(append([]string{"grant", "change", third, "--subject", commentRef + "=agent:other-bot", "--yes"}, cli...)...)
		if err != nil || !strings.Contains(out, "supersedes grant "+third) {
			t.Fatalf("xema grant change --yes: %v\n%s", err, out)
		}
		fourth := g.activeGrant(admin, "ticketing")
		// Revoke shows what it would deny first; it revokes only once confirmed (y, or --yes).
		out, err = g.run(append([]string{"grant", "revoke", fourth, "--dry-run"}, cli...)...)
		if err != nil || !strings.Contains(out, "grant "+fourth+": ticketing@1.0.0") || !strings.Contains(out, "would deny") ||
			!strings.Contains(out, "dry run: nothing revoked") || g.activeGrant(admin, "ticketing") != fourth {
			t.Fatalf("xema grant revoke --dry-run: %v\n%s", err, out)
		}
		for answer, want := range map[string]string{"": "not confirmed: nothing revoked", "n\n": "not confirmed: nothing revoked"} {
			out, code := g.cliInput(t, answer, append([]string{"grant", "revoke", fourth}, cli...)...)
			if code != 1 || !strings.Contains(out, "revoke grant "+fourth+"? [y/N]") || !strings.Contains(out, want) || g.activeGrant(admin, "ticketing") != fourth {
				t.Fatalf("xema grant revoke answered %q: exit %d\n%s", answer, code, out)
			}
		}
		if out, code := g.cliInput(t, "", append([]string{"grant", "revoke", fourth, "--dry-run", "--yes"}, cli...)...); code != 2 || g.activeGrant(admin, "ticketing") != fourth {
			t.Fatalf("xema grant revoke --dry-run --yes: exit %d\n%s", code, out)
		}
		out, code := g.cliInput(t, "y\n", append([]string{"grant", "revoke", fourth}, cli...)...)
		if code != 0 || !strings.Contains(out, "revoked by user:alice") {
			t.Fatalf("xema grant revoke answered y: exit %d\n%s", code, out)
		}
		out, err = g.run(append([]string{"grant", "list", "--biome", "ticketing"}, cli...)...)
		if err != nil || strings.Count(out, "superseded by") != 2 || strings.Count(out, "revoked by user:alice") != 2 {
			t.Fatalf("xema grant list: %v\n%s", err, out)
		}
		out, err = g.run(append([]string{"grant", "revoke", fourth, "--yes"}, cli...)...)
		if err == nil || !strings.Contains(out, "GRANT_NOT_ACTIVE") {
			t.Fatalf("xema grant revoke twice: %v\n%s", err, out)
		}
	})
}

// A call held for approval under a grant that is revoked meanwhile never runs: the revoke
// withdraws it, approving it is refused with GRANT_NOT_IN_EFFECT (403), audited, and the
// provider is never called.
func TestGrantRevokeRefusesHeldCalls(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		prov := newProvider(t)
		admin := g.adminToken()
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		id := str(heldCall(t, g, prov, admin, bot).Body, "approvalId")
		expect(t, g.revoke(admin, g.activeGrant(admin, "ticketing")), http.StatusOK)
		if v := g.get("/v1/invocations/"+id, bot); str(v.Body, "status") != "withdrawn" {
			t.Fatalf("the held call after the revoke: %d %s; want withdrawn", v.Status, v.Raw)
		}
		r := g.post("/v1/approvals/"+id+"/approve", admin, map[string]any{})
		if r.Status != http.StatusForbidden || str(r.Body, "code") != "GRANT_NOT_IN_EFFECT" || prov.count() != 0 {
			t.Fatalf("approve under a revoked grant: %d %s; provider calls %d; want 403 GRANT_NOT_IN_EFFECT, no run", r.Status, r.Raw, prov.count())
		}
		// Another org's administrator still learns nothing of it.
		eve := g.token("--subject", "user:eve", "--org-role", "org_admin", "--env", "org", "--org", "globex")
		expect(t, g.post("/v1/approvals/"+id+"/approve", eve, map[string]any{}), http.StatusNotFound)
		a := g.get("/v1/audit?ref=approval:approve@1", admin)
		if !strings.Contains(string(a.Raw), "GRANT_NOT_IN_EFFECT") {
			t.Fatalf("the refused approve is not audited: %s", a.Raw)
		}
	})
}

// A revoke made through replica A is refused on replica B within a second: B rebuilds on the
// store's NOTIFY. Measured over 20 rounds (grant, B allows; revoke, B refuses): p95 ≤ 1 s.
func TestReplicaRevokePropagation(t *testing.T) {
	const rounds, p95Bound = 20, time.Second
	gws := startReplicas(t, testpg.NewDatabase(t), 2)
	a, b := gws[0], gws[1]
	prov := newProvider(t)
	admin := a.adminToken()
	bot := a.token("--subject", "agent:support-bot", "--env", "project")
	sub := a.install(admin, biomeDir(t, "ticketing", prov.URL))
	invokeB := func() response { return b.post("/v1/capabilities/invoke", bot, commentCall()) }
	var delays []time.Duration
	for round := range rounds {
		if round > 0 {
			expect(t, a.grantCustomized(admin, sub, map[string]any{}), http.StatusCreated)
		}
		waitFor(t, "B follows the grant made through A", http.StatusOK, invokeB)
		expect(t, a.revoke(admin, a.activeGrant(admin, "ticketing")), http.StatusOK)
		delays = append(delays, waitFor(t, "B follows the revoke made through A", http.StatusForbidden, invokeB))
	}
	checkP95(t, "revoke through A → refused on B", "revoke propagation", delays, p95Bound)
}

// A revoke's dry run (DELETE /v1/grants/{id}?dryRun=true, what the console shows before it
// asks to confirm): what would now be denied of the org's recorded calls, which callers and
// the newest calls, with nothing revoked; its bad inputs refused, another org's grant unknown,
// a revoked one not active.
func TestGrantRevokeDryRun(t *testing.T) {
	g := startGateway(t, "")
	prov := newProvider(t)
	admin := g.adminToken()
	bot := g.token("--subject", "agent:support-bot", "--env", "project")
	acme := g.token("--subject", "user:bob", "--org-role", "org_admin", "--env", "org", "--org", "acme")
	g.install(admin, biomeDir(t, "ticketing", prov.URL))
	id := g.activeGrant(admin, "ticketing")
	for range 2 {
		expect(t, g.post("/v1/capabilities/invoke", bot, commentCall()), http.StatusOK)
	}

	dry := g.do(mustReq(t, http.MethodDelete, g.URL+"/v1/grants/"+id+"?dryRun=true&since=1h", admin))
	expect(t, dry, http.StatusOK)
	imp, _ := dry.Body["impact"].(map[string]any)
	losing, _ := imp["losing"].([]any)
	recent, _ := imp["recent"].([]any)
	if dry.Body["dryRun"] != true || imp["allowToDeny"] != 2.0 || len(losing) != 1 || len(recent) != 2 ||
		losing[0].(map[string]any)["subject"] != "agent:support-bot" || losing[0].(map[string]any)["calls"] != 2.0 ||
		recent[0].(map[string]any)["ref"] != commentRef || str(recent[0].(map[string]any), "auditId") == "" {
		t.Fatalf("the revoke's dry run: %s", dry.Raw)
	}
	if g.activeGrant(admin, "ticketing") != id {
		t.Fatal("a dry run revoked the grant")
	}
	expect(t, g.post("/v1/capabilities/invoke", bot, commentCall()), http.StatusOK)

	for _, q := range []string{"dryRun=maybe", "since=1h", "dryRun=true&since=9999h", "dryRun=true&since=soon", "force=true", "dryRun=true&dryRun=false"} {
		r := g.do(mustReq(t, http.MethodDelete, g.URL+"/v1/grants/"+id+"?"+q, admin))
		if r.Status != http.StatusBadRequest || str(r.Body, "code") == "" {
			t.Errorf("DELETE ?%s = %d %s, want 400 with a code", q, r.Status, r.Raw)
		}
	}
	if g.activeGrant(admin, "ticketing") != id {
		t.Fatal("a refused request revoked the grant")
	}
	if r := g.do(mustReq(t, http.MethodDelete, g.URL+"/v1/grants/"+id+"?dryRun=true", acme)); r.Status != http.StatusNotFound || str(r.Body, "code") != "GRANT_NOT_FOUND" {
		t.Errorf("another org's dry run: %d %s, want 404 GRANT_NOT_FOUND", r.Status, r.Raw)
	}
	if r := g.do(mustReq(t, http.MethodDelete, g.URL+"/v1/grants/"+id+"?dryRun=true", bot)); r.Status != http.StatusForbidden {
		t.Errorf("an agent's dry run: %d %s, want 403", r.Status, r.Raw)
	}
	expect(t, g.revoke(admin, id), http.StatusOK)
	if r := g.do(mustReq(t, http.MethodDelete, g.URL+"/v1/grants/"+id+"?dryRun=true", admin)); r.Status != http.StatusConflict || str(r.Body, "code") != "GRANT_NOT_ACTIVE" {
		t.Errorf("a revoked grant's dry run: %d %s, want 409 GRANT_NOT_ACTIVE", r.Status, r.Raw)
	}
}
