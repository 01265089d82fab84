package e2e

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Attacks on the boundaries of docs/security.md, tried black-box on the real binary: a
// caller or admin of another org (with the same subject refs as the victim's people), a
// malicious provider, a biome author. Each subtest asserts the safe behaviour.

// sameSubjects are one org's people and agents under subject refs every org shares: the
// admin of acme and the admin of beta are both user:alice, both orgs' agent is agent:bot.
type sameSubjects struct {
	name                      string
	alice, bob, bot, idem, wf string
}

func (g *gateway) sameSubjectsOrg(name string) sameSubjects {
	return sameSubjects{
		name:  name,
		alice: g.token("--subject", "user:alice", "--org-role", "org_admin", "--env", "org", "--org", name),
		bob:   g.token("--subject", "user:bob", "--org-role", "org_member", "--env", "project", "--org", name),
		bot:   g.token("--subject", "agent:bot", "--env", "project", "--org", name),
		idem:  g.token("--subject", "agent:idem", "--env", "project", "--org", name),
		wf:    g.token("--subject", "workflow:wf", "--env", "project", "--org", name),
	}
}

// installOperatorBiome grants the operator's demo biome for the admin's org, with customize.
func (g *gateway) installOperatorBiome(admin string, customize map[string]any) response {
	g.t.Helper()
	body := map[string]any{"biomeId": "demo", "version": "1.0.0", "digestHash": g.digestOf(admin, "demo", "1.0.0")}
	if customize != nil {
		body["customize"] = customize
	}
	return g.post("/v1/grants", admin, body)
}

func pageRead() map[string]any {
	return map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}}
}

func TestAttackSameSubjectsAcrossOrgs(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		prov := newProvider(t)
		acme, beta := g.sameSubjectsOrg("acme"), g.sameSubjectsOrg("beta")

		sub := g.install(acme.alice, biomeDir(t, "ticketing", prov.URL))
		expect(t, g.grantCustomized(acme.alice, sub, map[string]any{commentRef: map[string]any{"requiresApproval": true}}), http.StatusCreated)
		found := g.post("/v1/capabilities/invoke", acme.bot, findCall())
		expect(t, found, http.StatusOK)
		findAudit := str(found.Body, "auditId")
		held := g.post("/v1/capabilities/invoke", acme.bot, commentCall())
		expect(t, held, http.StatusAccepted)
		approvalID, heldAudit := str(held.Body, "approvalId"), str(held.Body, "auditId")
		acmeIDs := []string{findAudit, heldAudit, approvalID}
		// A denial of acme's, for why-denied.
		denied := g.post("/v1/capabilities/invoke", g.token("--subject", "agent:bot", "--env", "public-session", "--org", "acme"), findCall())
		expect(t, denied, http.StatusForbidden)
		deniedAudit := str(denied.Body, "auditId")
		acmeIDs = append(acmeIDs, deniedAudit)

		leaks := func(t *testing.T, what string, raw []byte) {
			t.Helper()
			for _, id := range acmeIDs {
				if id != "" && strings.Contains(string(raw), id) {
					t.Errorf("%s shows acme's %s: %s", what, id, raw)
				}
			}
			for _, s := range []string{"ada@example.com", "hello", "ticket:"} {
				if strings.Contains(string(raw), s) {
					t.Errorf("%s shows acme's %q: %s", what, s, raw)
				}
			}
		}

		t.Run("audit search filters do not reach acme", func(t *testing.T) {
			for _, tok := range []string{beta.alice, beta.bot, beta.bob} {
				for _, q := range []string{"", "?subject=agent:bot", "?subject=user:alice", "?ref=ticket:find@1",
					"?parent=" + heldAudit, "?parent=" + findAudit, "?decision=pending-approval", "?decision=allowed",
					"?reason=ENVIRONMENT_NOT_ALLOWED", "?decision=unauthenticated"} {
					r := g.get("/v1/audit"+q, tok)
					expect(t, r, http.StatusOK)
					leaks(t, "beta GET /v1/audit"+q, r.Raw)
				}
			}
		})

		t.Run("the same subject ref in beta reads none of acme's records", func(t *testing.T) {
			// beta's agent:bot is not acme's agent:bot, though the subject ref is the same.
			for _, id := range []string{findAudit, findAudit + ".outcome", heldAudit, deniedAudit} {
				for _, tok := range []string{beta.bot, beta.alice} {
					expect(t, g.get("/v1/audit/"+id, tok), http.StatusNotFound)
					expect(t, g.get("/v1/audit/"+id+"/why-denied", tok), http.StatusNotFound)
				}
			}
			expect(t, g.get("/v1/audit/"+deniedAudit+"/why-denied", acme.bot), http.StatusOK)
		})

		t.Run("acme's audit cursor does not open for beta's alice", func(t *testing.T) {
			page := g.get("/v1/audit?limit=1", acme.alice)
			expect(t, page, http.StatusOK)
			cur := str(page.Body, "nextCursor")
			if cur == "" {
				t.Fatalf("no next cursor: %s", page.Raw)
			}
			expect(t, g.get("/v1/audit?limit=1&cursor="+url.QueryEscape(cur), acme.alice), http.StatusOK)
			r := g.get("/v1/audit?limit=1&cursor="+url.QueryEscape(cur), beta.alice)
			expect(t, r, http.StatusBadRequest)
			leaks(t, "beta with acme's cursor", r.Raw)
		})

		t.Run("acme's search cursor does not open for beta's agent", func(t *testing.T) {
			// The demo biome is granted in both orgs so that both see more than one result.
			expect(t, g.installOperatorBiome(acme.alice, nil), http.StatusCreated)
			expect(t, g.installOperatorBiome(beta.alice, nil), http.StatusCreated)
			first := g.post("/v1/capabilities/search", acme.bot, map[string]any{"limit": 1})
			expect(t, first, http.StatusOK)
			cur := str(first.Body, "nextCursor")
			if cur == "" {
				t.Fatalf("no next cursor: %s", first.Raw)
			}
			expect(t, g.post("/v1/capabilities/search", acme.bot, map[string]any{"limit": 1, "cursor": cur}), http.StatusOK)
			r := g.post("/v1/capabilities/search", beta.bot, map[string]any{"limit": 1, "cursor": cur})
			if r.Status != http.StatusBadRequest || str(r.Body, "code") != "INVALID_CURSOR" {
				t.Errorf("beta's agent:bot opened acme's agent:bot search cursor: %d %s", r.Status, r.Raw)
			}
		})

		t.Run("beta's alice neither decides nor reads acme's held call", func(t *testing.T) {
			// acme's alice may approve it; beta's alice has the same subject ref and role.
			for _, tok := range []string{beta.alice, beta.bob} {
				ap := g.post("/v1/approvals/"+approvalID+"/approve", tok, map[string]any{})
				unknown := g.post("/v1/approvals/apr_aaaaaaaaaaaaaaaa/approve", tok, map[string]any{})
				sameAnswer(t, "approve", ap, unknown, commentRef, "hello")
				rej := g.post("/v1/approvals/"+approvalID+"/reject", tok, map[string]any{"reason": "no"})
				unknownRej := g.post("/v1/approvals/apr_aaaaaaaaaaaaaaaa/reject", tok, map[string]any{"reason": "no"})
				sameAnswer(t, "reject", rej, unknownRej, commentRef, "hello")
				inv := g.get("/v1/invocations/"+approvalID, tok)
				unknownInv := g.get("/v1/invocations/apr_aaaaaaaaaaaaaaaa", tok)
				sameAnswer(t, "invocation", inv, unknownInv, commentRef, "hello")
				list := g.get("/v1/approvals?status=pending", tok)
				leaks(t, "beta approvals list", list.Raw)
			}
			if out, err := g.run("approvals", "approve", approvalID, "--server", g.URL, "--token", beta.alice); err == nil {
				t.Errorf("the CLI approved acme's call as beta's alice:\n%s", out)
			}
			if out, _ := g.run("approvals", "list", "--server", g.URL, "--token", beta.alice); strings.Contains(out, approvalID) {
				t.Errorf("the CLI lists acme's call for beta's alice:\n%s", out)
			}
			still := g.get("/v1/invocations/"+approvalID, acme.alice)
			expect(t, still, http.StatusOK)
			if str(still.Body, "status") != "pending" || prov.count() != 1 {
				t.Fatalf("acme's held call after beta's alice: %s (provider calls %d)", still.Raw, prov.count())
			}
		})

		t.Run("meta-tools over MCP treat acme's refs as unknown for beta", func(t *testing.T) {
			s, err := mcpSession(t, g, beta.bot)
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				tool string
				args func(ref string) map[string]any
			}{
				{"xema_capabilities_describe", func(ref string) map[string]any { return map[string]any{"refs": []string{ref}} }},
				{"xema_capabilities_preflight", func(ref string) map[string]any { return map[string]any{"ref": ref} }},
				{"xema_capabilities_explain", func(ref string) map[string]any {
					return map[string]any{"capabilityRef": ref, "denialCode": "MISSING_GRANT"}
				}},
				{"xema_capabilities_invoke", func(ref string) map[string]any {
					return map[string]any{"ref": ref, "input": map[string]any{"customerEmail": "x@example.com"}}
				}},
				{"xema_capabilities_plan", func(ref string) map[string]any {
					return map[string]any{"goalCapabilityRef": ref, "fromResourceTypes": []string{"ticket"}}
				}},
			} {
				got, gotErr := callTool(t, s, tc.tool, tc.args("ticket:find@1"))
				want, wantErr := callTool(t, s, tc.tool, tc.args("ticket:nothing@1"))
				gotRaw, _ := json.Marshal(got)
				if gotErr != wantErr || str(got, "code") != str(want, "code") {
					t.Errorf("%s: acme's ref answered %v %s, an unknown one %v %v", tc.tool, gotErr, gotRaw, wantErr, want)
				}
				for _, l := range []string{"ticketing", "internal", "integration", "Find a customer"} {
					if strings.Contains(string(gotRaw), l) {
						t.Errorf("%s: names %q: %s", tc.tool, l, gotRaw)
					}
				}
			}
			res, _ := callTool(t, s, "xema_capabilities_search", map[string]any{"query": "ticket"})
			raw, _ := json.Marshal(res)
			if strings.Contains(string(raw), "ticket:") {
				t.Errorf("beta's MCP search lists acme's refs: %s", raw)
			}
			res, _ = callTool(t, s, "xema_capabilities_plan", map[string]any{"goalCapabilityRef": "ticket:comment.add@1", "fromResourceTypes": []string{"ticket"}})
			raw, _ = json.Marshal(res)
			if strings.Contains(string(raw), "ticket:find") {
				t.Errorf("beta's plan routes through acme's refs: %s", raw)
			}
			if prov.count() != 1 {
				t.Errorf("beta's MCP calls reached acme's provider: %d calls", prov.count())
			}
		})

		t.Run("beta lists none of acme's biomes, grants, bindings, credentials or servers", func(t *testing.T) {
			for _, p := range []string{"/v1/biomes", "/v1/grants", "/v1/bindings", "/v1/credentials", "/v1/mcp-servers",
				"/v1/grants?biomeId=ticketing", "/v1/biomes?biomeId=ticketing"} {
				r := g.get(p, beta.alice)
				if strings.Contains(string(r.Raw), "ticketing") || strings.Contains(string(r.Raw), prov.URL) {
					t.Errorf("beta GET %s: %d %s", p, r.Status, r.Raw)
				}
			}
			got := g.get("/v1/biomes/ticketing/1.0.0", beta.alice)
			unknown := g.get("/v1/biomes/no-such-biome/1.0.0", beta.alice)
			sameAnswer(t, "biome get", got, unknown, prov.URL, "ticket:find")
		})

		t.Run("beta's dry run counts none of acme's calls", func(t *testing.T) {
			dry := func() response {
				r := g.post("/v1/grants?dryRun=true", beta.alice, map[string]any{"biomeId": "demo", "version": "1.0.0",
					"digestHash": g.digestOf(beta.alice, "demo", "1.0.0"), "profile": "internal-agent"})
				expect(t, r, http.StatusOK)
				return r
			}
			// Each dry run records beta's own calls (the digest read, the dry run): the step
			// between two dry runs with nothing else in between is the baseline.
			impact := func(r response) float64 {
				n, _ := r.Body["impact"].(map[string]any)["considered"].(float64)
				return n
			}
			first := impact(dry())
			second := impact(dry())
			for range 3 {
				expect(t, g.post("/v1/capabilities/invoke", acme.wf, pageRead()), http.StatusOK)
			}
			third := impact(dry())
			if third-second != second-first {
				t.Errorf("beta's dry run considered %v, %v, then %v after 3 calls of acme's: acme's calls are counted", first, second, third)
			}
		})

		t.Run("an idempotency key of acme's agent is not beta's", func(t *testing.T) {
			call := map[string]any{"ref": "workflow:run.start@1", "input": map[string]any{"workflowId": "onboarding"}}
			try := func(tok string) response {
				raw, _ := json.Marshal(call)
				req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/capabilities/invoke", strings.NewReader(string(raw)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tok)
				req.Header.Set("Idempotency-Key", "shared-key-1")
				return g.do(req)
			}
			a := try(acme.idem)
			expect(t, a, http.StatusOK)
			b := try(beta.idem)
			expect(t, b, http.StatusOK)
			if b.Header.Get("Idempotent-Replayed") != "" || str(b.Body, "auditId") == str(a.Body, "auditId") {
				t.Errorf("beta's agent:idem got acme's answer under the same key: %s (replayed %q)", b.Raw, b.Header.Get("Idempotent-Replayed"))
			}
			if rec := g.get("/v1/audit/"+str(b.Body, "auditId"), beta.idem); rec.Status != http.StatusOK {
				t.Errorf("beta's answer's audit record is not beta's: %d %s", rec.Status, rec.Raw)
			}
			again := try(acme.idem)
			if again.Header.Get("Idempotent-Replayed") == "" || str(again.Body, "auditId") != str(a.Body, "auditId") {
				t.Errorf("acme's retry is not a replay of acme's first answer: %s", again.Raw)
			}
		})

		t.Run("rate limits are counted per org", func(t *testing.T) {
			limit := map[string]any{"kb:page.read@1": map[string]any{"rateLimit": map[string]any{"requests": 1, "per": "1h"}}}
			expect(t, g.installOperatorBiome(acme.alice, limit), http.StatusCreated)
			expect(t, g.installOperatorBiome(beta.alice, limit), http.StatusCreated)
			expect(t, g.post("/v1/capabilities/invoke", acme.bot, pageRead()), http.StatusOK)
			// beta's agent:bot has spent nothing of beta's limit.
			r := g.post("/v1/capabilities/invoke", beta.bot, pageRead())
			if r.Status != http.StatusOK {
				t.Errorf("beta's agent:bot, after acme's agent:bot used acme's quota: %d %s", r.Status, r.Raw)
			}
			expect(t, g.post("/v1/capabilities/invoke", acme.bot, pageRead()), http.StatusTooManyRequests)
		})
	})
}

// TestAttackBiomeAuthor: a biome of beta's that declares refs acme's biome owns, and an MCP
// server of beta's whose provider id is acme's biome id, change nothing for acme.
func TestAttackBiomeAuthor(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		acmeProv, betaProv := newProvider(t), newProvider(t)
		acme, beta := g.sameSubjectsOrg("acme"), g.sameSubjectsOrg("beta")
		g.install(acme.alice, biomeDir(t, "ticketing", acmeProv.URL))

		t.Run("beta's biome declaring acme's refs", func(t *testing.T) {
			dir := biomeDir(t, "ticketing", betaProv.URL)
			editJSON(t, filepath.Join(dir, "biome.json"), func(doc map[string]any) { doc["id"] = "beta-tickets" })
			sub := g.post("/v1/biomes", beta.alice, submission(t, dir))
			if sub.Status == http.StatusCreated {
				grant := g.post("/v1/grants", beta.alice, map[string]any{"biomeId": "beta-tickets", "version": "1.0.0",
					"digestHash": str(sub.Body, "digest.hash")})
				t.Logf("beta's submission of acme's refs was accepted; grant: %d %s", grant.Status, grant.Raw)
			} else {
				t.Logf("beta's submission of acme's refs: %d %s", sub.Status, sub.Raw)
				if sub.Status >= 500 {
					t.Errorf("submission answered %d", sub.Status)
				}
			}
			for _, s := range []string{acmeProv.URL, "acme", "ticketing"} {
				if strings.Contains(string(sub.Raw), s) {
					t.Errorf("the refusal names acme's %q: %s", s, sub.Raw)
				}
			}
			expect(t, g.post("/v1/capabilities/invoke", acme.bot, findCall()), http.StatusOK)
			if acmeProv.count() != 1 || betaProv.count() != 0 {
				t.Fatalf("acme's call went to acme %d times, to beta's provider %d times", acmeProv.count(), betaProv.count())
			}
			// beta's agent reaching ticket:find@1 must never reach acme's provider.
			g.post("/v1/capabilities/invoke", beta.bot, findCall())
			if acmeProv.count() != 1 {
				t.Errorf("beta's call reached acme's provider")
			}
			// acme's search still describes acme's own entry.
			d := g.post("/v1/capabilities/describe", acme.bot, map[string]any{"refs": []string{"ticket:find@1"}})
			expect(t, d, http.StatusOK)
			if strings.Contains(string(d.Raw), "beta-tickets") {
				t.Errorf("acme's describe shows beta's biome: %s", d.Raw)
			}
		})

		t.Run("beta's MCP server under acme's biome id", func(t *testing.T) {
			r := g.post("/v1/mcp-servers", beta.alice, map[string]any{"providerId": "ticketing", "transport": "streamable-http",
				"url": betaProv.URL + "/mcp"})
			if r.Status == http.StatusCreated || r.Status == http.StatusOK {
				t.Fatalf("beta registered an MCP server under acme's biome id: %s", r.Raw)
			}
			expect(t, g.post("/v1/capabilities/invoke", acme.bot, findCall()), http.StatusOK)
			if betaProv.count() != 0 {
				t.Errorf("beta's provider got %d calls", betaProv.count())
			}
		})
	})
}

// TestAttackNoOrgRecords: audit records of no org (unauthenticated attempts) are read only by
// admins of the operator's org, and a token naming no org is in that org with its own role.
func TestAttackNoOrgRecords(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		r := g.get("/v1/audit", "not-a-jwt")
		expect(t, r, http.StatusUnauthorized)
		id := str(r.Body, "auditId")
		if id == "" {
			t.Fatalf("401 without an auditId: %s", r.Raw)
		}
		operatorAdmin := g.token("--subject", "user:root", "--org-role", "org_admin", "--env", "org")
		noOrgAgent := g.token("--subject", "agent:x", "--env", "project")
		noOrgMember := g.token("--subject", "user:m", "--org-role", "org_member", "--env", "project")
		otherAdmin := g.token("--subject", "user:root", "--org-role", "org_admin", "--env", "org", "--org", "beta")
		ownerElsewhere := g.token("--subject", "user:root", "--org-role", "org_owner", "--env", "org", "--org", "default2")
		expect(t, g.get("/v1/audit/"+id, operatorAdmin), http.StatusOK)
		for name, tok := range map[string]string{"no-org agent": noOrgAgent, "no-org member": noOrgMember, "beta admin": otherAdmin, "other owner": ownerElsewhere} {
			if got := g.get("/v1/audit/"+id, tok); got.Status != http.StatusNotFound {
				t.Errorf("%s read a record of no org: %d %s", name, got.Status, got.Raw)
			}
			list := g.get("/v1/audit?decision=unauthenticated", tok)
			if strings.Contains(string(list.Raw), id) {
				t.Errorf("%s lists a record of no org: %s", name, list.Raw)
			}
		}
	})
}

// TestAttackMaliciousProvider: a provider answering a redirect, a huge body, a slow drip or
// leaking internal text gets a typed 502 and nothing of it reaches the caller, but for a JSON or
// plain-text error body, passed on only as the provider's own (providerBody, ≤ 4 KiB).
func TestAttackMaliciousProvider(t *testing.T) {
	g := startGateway(t, "")
	var target atomic.Int32
	second := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { target.Add(1) }))
	t.Cleanup(second.Close)
	var modeV atomic.Value
	modeV.Store("ok")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		switch modeV.Load().(string) {
		case "redirect":
			http.Redirect(w, r, second.URL+"/steal", http.StatusTemporaryRedirect)
		case "huge":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ticketId":"`))
			chunk := strings.Repeat("A", 1<<16)
			for range 100 { // 6.4 MiB
				if _, err := w.Write([]byte(chunk)); err != nil {
					return
				}
			}
			_, _ = w.Write([]byte(`"}`))
		case "drip":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			fl := w.(http.Flusher)
			for i := 0; i < 100; i++ {
				if _, err := w.Write([]byte(" ")); err != nil {
					return
				}
				fl.Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
		case "secret":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error":"db password hunter2 at 10.0.0.7"}`))
		case "secret-html":
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("X-Debug", "hunter2")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`<pre>db password hunter2 at 10.0.0.7</pre>`))
		case "echo-token":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"bad token","got":"` + r.Header.Get("Authorization") + `"}`))
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88"}`))
		}
	}))
	t.Cleanup(srv.Close)
	acme := g.sameSubjectsOrg("acme")
	dir := biomeDir(t, "ticketing", srv.URL)
	editJSON(t, filepath.Join(dir, "contributions", "find.capability.contribution.json"), func(doc map[string]any) {
		doc["invocation"].(map[string]any)["timeoutMs"] = 2000
	})
	g.install(acme.alice, dir)
	expect(t, g.post("/v1/capabilities/invoke", acme.bot, findCall()), http.StatusOK)
	for _, m := range []string{"redirect", "huge", "drip", "secret", "secret-html", "echo-token"} {
		modeV.Store(m)
		start := time.Now()
		r := g.post("/v1/capabilities/invoke", acme.bot, findCall())
		if r.Status != http.StatusBadGateway && r.Status != http.StatusGatewayTimeout {
			t.Errorf("%s: %d %.300s", m, r.Status, r.Raw)
		}
		raw := string(r.Raw)
		if m == "secret" { // the provider's own JSON error body, marked as its own and nowhere else
			pb := str(r.Body, "providerBody")
			if pb != `{"error":"db password hunter2 at 10.0.0.7"}` || strings.Contains(str(r.Body, "message"), "hunter2") {
				t.Errorf("secret: the provider's JSON error body is not passed on as providerBody alone: %.300s", r.Raw)
			}
			rest := maps.Clone(r.Body)
			delete(rest, "providerBody")
			b, err := json.Marshal(rest)
			if err != nil {
				t.Fatal(err)
			}
			raw = string(b)
		}
		if m == "echo-token" && (str(r.Body, "providerBody") != "" || strings.Contains(raw, "Bearer")) {
			t.Errorf("echo-token: a body quoting the gateway's service token reaches the caller: %.300s", r.Raw)
		}
		if len(r.Raw) > 64<<10 || strings.Contains(raw, "hunter2") || strings.Contains(raw, second.URL) {
			t.Errorf("%s: the provider's answer reaches the caller (%d bytes): %.300s", m, len(r.Raw), r.Raw)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: the call took %s, past its 2s timeout", m, d)
		}
		t.Logf("%s: %d %s", m, r.Status, str(r.Body, "code"))
	}
	if n := target.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests", n)
	}
}

// TestAttackMetricsNameOtherOrgsRefs: metrics label decisions with every org's refs, so on
// the API listener GET /metrics is served only to the --metrics-reader subjects: neither an
// unauthenticated client nor another org's admin learns the refs an org's biome provides.
func TestAttackMetricsNameOtherOrgsRefs(t *testing.T) {
	g := startGateway(t, "")
	prov := newProvider(t)
	acme := g.sameSubjectsOrg("acme")
	g.install(acme.alice, biomeDir(t, "ticketing", prov.URL))
	expect(t, g.post("/v1/capabilities/invoke", acme.bot, findCall()), http.StatusOK)
	beta := g.sameSubjectsOrg("beta")
	for _, tok := range []string{"", beta.alice, acme.alice} {
		m := g.get("/metrics", tok)
		if m.Status == http.StatusOK || strings.Contains(string(m.Raw), `ticket:find@1`) {
			t.Errorf("GET /metrics without being a --metrics-reader: %d, names acme's ref: %v", m.Status, strings.Contains(string(m.Raw), "ticket:find@1"))
		}
	}
}
