package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestActingForAPerson: an agent whose token says it acts for a person (act) calls as that
// pair. The grant covers the agent, the person holds the capability, and the capability is
// delegable: the call runs, and its records, why-denied and GET /v1/me name the person and the
// actor. A capability without delegable is NOT_DELEGABLE; a person whose token allows other
// actors (may_act) is ACTOR_NOT_ALLOWED; search shows a delegated caller only what it could
// invoke; a malformed act is a 401 that changes nothing.
func TestActingForAPerson(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		admin := g.adminToken()
		forAnn := g.token("--subject", "user:ann", "--org-role", "org_member", "--env", "project", "--act", "agent:support-bot")
		read := map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}}

		r := g.post("/v1/capabilities/invoke", forAnn, read)
		expect(t, r, http.StatusOK)
		id := str(r.Body, "auditId")
		rec := g.get("/v1/audit/"+id, admin)
		expect(t, rec, http.StatusOK)
		if str(rec.Body, "subject.ref") != "agent:support-bot" || str(rec.Body, "onBehalfOf.person.ref") != "user:ann" {
			t.Fatalf("decision record %s: want subject agent:support-bot on behalf of user:ann", rec.Raw)
		}
		out := g.get("/v1/audit/"+id+".outcome", admin)
		expect(t, out, http.StatusOK)
		if str(out.Body, "onBehalfOf.person.ref") != "user:ann" {
			t.Errorf("outcome record %s does not name the person", out.Raw)
		}

		me := g.get("/v1/me", forAnn)
		expect(t, me, http.StatusOK)
		if str(me.Body, "subject.ref") != "agent:support-bot" || str(me.Body, "delegation.person.ref") != "user:ann" ||
			str(me.Body, "orgRole") != "" || str(me.Body, "delegation.orgRole") != "org_member" {
			t.Fatalf("GET /v1/me %s: want the agent, without the person's org role, acting for user:ann", me.Raw)
		}

		send := map[string]any{"ref": "connector:channel.send-message@1", "input": map[string]any{"conversation": "c1", "text": "hi"}}
		r = g.post("/v1/capabilities/invoke", forAnn, send)
		expect(t, r, http.StatusForbidden)
		if !slices.Contains(reasonCodes(r.Body), "NOT_DELEGABLE") {
			t.Fatalf("a capability without delegable: %s, want NOT_DELEGABLE", r.Raw)
		}
		why := g.get("/v1/audit/"+str(r.Body, "auditId")+"/why-denied", admin)
		expect(t, why, http.StatusOK)
		if str(why.Body, "onBehalfOf.person.ref") != "user:ann" || !strings.Contains(string(why.Raw), "may call it themselves") {
			t.Errorf("why-denied %s: want the person and that they may call it themselves", why.Raw)
		}

		search := g.post("/v1/capabilities/search", forAnn, map[string]any{})
		expect(t, search, http.StatusOK)
		if refs := refsOf(search.Body, "capabilities"); !slices.Contains(refs, "kb:page.read@1") || slices.Contains(refs, "connector:channel.send-message@1") {
			t.Errorf("a delegated caller's search: %v, want kb:page.read@1 and not the undelegable send-message", refs)
		}
		direct := g.post("/v1/capabilities/search", g.token("--subject", "agent:support-bot", "--env", "project"), map[string]any{})
		if refs := refsOf(direct.Body, "capabilities"); !slices.Contains(refs, "connector:channel.send-message@1") {
			t.Fatalf("the agent's own search %v lacks send-message: the previous check proves nothing", refs)
		}

		// Describe hides what the pair could not invoke; preflight names why.
		if d := g.post("/v1/capabilities/describe", forAnn, map[string]any{"refs": []string{"connector:channel.send-message@1"}}); d.Status != http.StatusNotFound {
			t.Errorf("describe of an undelegable capability for the pair: %d %s; want 404, as for a capability it cannot see", d.Status, d.Raw)
		}
		expect(t, g.post("/v1/capabilities/describe", forAnn, map[string]any{"refs": []string{"kb:page.read@1"}}), http.StatusOK)
		pre := g.post("/v1/capabilities/preflight", forAnn, map[string]any{"ref": "connector:channel.send-message@1"})
		if !strings.Contains(string(pre.Raw), "NOT_DELEGABLE") {
			t.Errorf("preflight for the pair: %d %s; want a NOT_DELEGABLE blocker", pre.Status, pre.Raw)
		}

		// The same over MCP, through the official go-sdk client.
		sess, err := mcpSession(t, g, forAnn)
		if err != nil {
			t.Fatal(err)
		}
		if out, isErr := callTool(t, sess, "xema_capabilities_invoke", read); isErr || out["output"] == nil {
			t.Fatalf("MCP invoke for the person: %v", out)
		}
		if out, isErr := callTool(t, sess, "xema_capabilities_invoke", send); !isErr || !strings.Contains(fmt.Sprint(out), "NOT_DELEGABLE") {
			t.Fatalf("MCP invoke of an undelegable capability: %v, want NOT_DELEGABLE", out)
		}

		other := g.token("--subject", "user:ann", "--env", "project", "--act", "agent:support-bot", "--may-act", "agent:other")
		r = g.post("/v1/capabilities/invoke", other, read)
		expect(t, r, http.StatusForbidden)
		if !slices.Contains(reasonCodes(r.Body), "ACTOR_NOT_ALLOWED") {
			t.Fatalf("may_act naming another actor: %s, want ACTOR_NOT_ALLOWED", r.Raw)
		}
		allowed := g.token("--subject", "user:ann", "--env", "project", "--act", "agent:support-bot", "--may-act", "agent:support-bot")
		expect(t, g.post("/v1/capabilities/invoke", allowed, read), http.StatusOK)

		bad := []struct {
			name         string
			edit         func(header, claims map[string]any)
			code, reason string
		}{
			{"act not an object", func(_, c map[string]any) { c["act"] = "agent:support-bot" }, "bad_claims", "not an object"},
			{"actor is the subject", func(_, c map[string]any) { c["act"] = map[string]any{"sub": "user:ann"} }, "bad_claims", "own subject"},
			{"chain too deep", func(_, c map[string]any) {
				act := map[string]any{"sub": "agent:a0"}
				for _, s := range []string{"agent:a1", "agent:a2", "agent:a3", "agent:a4"} {
					act = map[string]any{"sub": s, "act": act}
				}
				c["act"] = act
			}, "bad_claims", "deeper than"},
			{"a transaction token", func(h, _ map[string]any) { h["typ"] = "txntoken+jwt" }, "wrong_typ", "typ"},
		}
		for _, b := range bad {
			tok := resigned(t, g, forAnn, b.edit)
			r := g.post("/v1/capabilities/invoke", tok, read)
			expect(t, r, http.StatusUnauthorized)
			if msg := str(r.Body, "message"); !strings.Contains(msg, b.reason) {
				t.Errorf("%s: 401 %q does not say %q", b.name, msg, b.reason)
			}
			rec := g.get("/v1/audit/"+str(r.Body, "auditId"), admin)
			if str(rec.Body, "aggregate.reason") != b.code {
				t.Errorf("%s: audit record %s, want reason %s", b.name, rec.Raw, b.code)
			}
		}
	})
}
