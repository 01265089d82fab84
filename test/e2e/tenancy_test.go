package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// org is one tenant's people and agents.
type org struct {
	name                   string
	admin, member, bot, wf string
}

func (g *gateway) org(name string) org {
	return org{
		name:   name,
		admin:  g.token("--subject", "user:admin-"+name, "--org-role", "org_admin", "--env", "org", "--org", name),
		member: g.token("--subject", "user:member-"+name, "--org-role", "org_member", "--env", "project", "--org", name),
		bot:    g.token("--subject", "agent:bot-"+name, "--env", "project", "--org", name),
		wf:     g.token("--subject", "workflow:wf-"+name, "--env", "project", "--org", name),
	}
}

// TestTenancy tries, as an admin, member and agent of org beta, every cross-org move on what
// org acme installed, held and audited; each answers as for an unknown id and changes nothing.
func TestTenancy(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		prov := newProvider(t)
		acme, beta := g.org("acme"), g.org("beta")

		sub := g.install(acme.admin, biomeDir(t, "ticketing", prov.URL))
		expect(t, g.grantCustomized(acme.admin, sub, map[string]any{commentRef: map[string]any{"requiresApproval": true}}), http.StatusCreated)
		expect(t, g.post("/v1/capabilities/invoke", acme.bot, findCall()), http.StatusOK)

		t.Run("beta cannot grant, resubmit or retire acme's biome", func(t *testing.T) {
			grant := g.post("/v1/grants", beta.admin, map[string]any{"biomeId": "ticketing", "version": "1.0.0",
				"digestHash": str(sub.Body, "digest.hash")})
			unknown := g.post("/v1/grants", beta.admin, map[string]any{"biomeId": "no-such-biome", "version": "1.0.0",
				"digestHash": str(sub.Body, "digest.hash")})
			expect(t, grant, unknown.Status)
			if str(grant.Body, "code") != str(unknown.Body, "code") {
				t.Errorf("grant of acme's biome answered %s, an unknown biome %s", grant.Raw, unknown.Raw)
			}
			resub := g.post("/v1/biomes", beta.admin, submission(t, biomeDir(t, "ticketing", prov.URL)))
			expect(t, resub, http.StatusConflict)
			if str(resub.Body, "code") != "BIOME_ID_TAKEN" {
				t.Errorf("resubmission under acme's id: %s", resub.Raw)
			}
			retire := g.post("/v1/lifecycle", beta.admin, map[string]any{"ref": "ticket:find@1", "to": "retired", "replacedBy": "kb:page.read@1"})
			expect(t, retire, http.StatusNotFound)
			// acme's callers are still served by acme's grant.
			expect(t, g.post("/v1/capabilities/invoke", acme.bot, findCall()), http.StatusOK)
		})

		t.Run("acme's refs look unknown to beta", func(t *testing.T) {
			for _, tok := range []string{beta.bot, beta.admin, beta.member} {
				got := g.post("/v1/capabilities/invoke", tok, findCall())
				want := g.post("/v1/capabilities/invoke", tok, map[string]any{"ref": "ticket:nothing@1", "input": map[string]any{}})
				sameAnswer(t, "invoke", got, want, "ticketing")
				d := g.post("/v1/capabilities/describe", tok, map[string]any{"refs": []string{"ticket:find@1"}})
				du := g.post("/v1/capabilities/describe", tok, map[string]any{"refs": []string{"ticket:nothing@1"}})
				sameAnswer(t, "describe", d, du, "ticketing")
			}
			before := prov.count()
			search := g.post("/v1/capabilities/search", beta.admin, map[string]any{"query": "ticket"})
			expect(t, search, http.StatusOK)
			if strings.Contains(string(search.Raw), "ticket:") || prov.count() != before {
				t.Errorf("beta's search shows acme's refs: %s", search.Raw)
			}
		})

		held := g.post("/v1/capabilities/invoke", acme.bot, commentCall())
		expect(t, held, http.StatusAccepted)
		approvalID, heldAudit := str(held.Body, "approvalId"), str(held.Body, "auditId")

		t.Run("beta sees and decides none of acme's held calls", func(t *testing.T) {
			list := g.get("/v1/approvals", beta.admin)
			expect(t, list, http.StatusOK)
			if strings.Contains(string(list.Raw), approvalID) || strings.Contains(string(list.Raw), "hello") {
				t.Fatalf("beta lists acme's held call: %s", list.Raw)
			}
			for _, tok := range []string{beta.admin, beta.member} {
				ap := g.post("/v1/approvals/"+approvalID+"/approve", tok, map[string]any{})
				unknown := g.post("/v1/approvals/apr_aaaaaaaaaaaaaaaa/approve", tok, map[string]any{})
				sameAnswer(t, "approve", ap, unknown, commentRef)
				rej := g.post("/v1/approvals/"+approvalID+"/reject", tok, map[string]any{"reason": "no"})
				expect(t, rej, http.StatusNotFound)
				expect(t, g.get("/v1/invocations/"+approvalID, tok), http.StatusNotFound)
			}
			if prov.count() != 2 {
				t.Fatalf("the provider got %d calls, want acme's 2 finds; beta's approve ran acme's held call", prov.count())
			}
			still := g.get("/v1/invocations/"+approvalID, acme.admin)
			expect(t, still, http.StatusOK)
			if str(still.Body, "status") != "pending" {
				t.Fatalf("acme's held call after beta's attempts: %s", still.Raw)
			}
		})

		t.Run("beta reads none of acme's audit records", func(t *testing.T) {
			for _, tok := range []string{beta.admin, beta.member, beta.bot} {
				expect(t, g.get("/v1/audit/"+heldAudit, tok), http.StatusNotFound)
				expect(t, g.get("/v1/audit/"+heldAudit+"/why-denied", tok), http.StatusNotFound)
			}
			expect(t, g.get("/v1/audit/"+heldAudit, acme.admin), http.StatusOK)
			expect(t, g.get("/v1/audit/"+heldAudit, acme.bot), http.StatusOK)
		})

		t.Run("an acme approver runs it", func(t *testing.T) {
			ap := g.post("/v1/approvals/"+approvalID+"/approve", acme.admin, map[string]any{})
			expect(t, ap, http.StatusOK)
			if prov.count() != 3 {
				t.Fatalf("provider calls = %d after acme's approval, want 3", prov.count())
			}
		})

		t.Run("an operator biome is granted per org", func(t *testing.T) {
			read := map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}}
			defaultBot := g.token("--subject", "agent:support-bot", "--env", "project")
			expect(t, g.post("/v1/capabilities/invoke", defaultBot, read), http.StatusOK)
			den := g.post("/v1/capabilities/invoke", beta.bot, read)
			expect(t, den, http.StatusForbidden)
			if !strings.Contains(string(den.Raw), "MISSING_GRANT") {
				t.Fatalf("beta's call under the default org's demo grant: %s", den.Raw)
			}
		})
	})
}

// TestGrantPinsVersion: a newer version of a biome (new URL, approval turned off) changes
// nothing for an org until its admin approves that version's digest.
func TestGrantPinsVersion(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		v1prov, v2prov := newProvider(t), newProvider(t)
		acme := g.org("acme")
		v1 := biomeDir(t, "ticketing", v1prov.URL)
		setCommentApproval(t, v1, true)
		sub1 := g.install(acme.admin, v1)
		expect(t, g.post("/v1/capabilities/invoke", acme.bot, commentCall()), http.StatusAccepted)

		v2 := biomeDir(t, "ticketing", v2prov.URL)
		setCommentApproval(t, v2, false)
		bumpVersion(t, v2, "1.0.1")
		sub2 := g.post("/v1/biomes", acme.admin, submission(t, v2))
		expect(t, sub2, http.StatusCreated)
		if str(sub2.Body, "digest.hash") == str(sub1.Body, "digest.hash") {
			t.Fatal("1.0.1 has the digest of 1.0.0")
		}
		// Submitted, not granted: the 1.0.0 grant still holds the call and 1.0.1's URL is never called.
		held := g.post("/v1/capabilities/invoke", acme.bot, commentCall())
		expect(t, held, http.StatusAccepted)
		find := g.post("/v1/capabilities/invoke", acme.bot, findCall())
		expect(t, find, http.StatusOK)
		if v2prov.count() != 0 || v1prov.count() != 1 {
			t.Fatalf("before 1.0.1 was granted: v1 provider %d calls, v2 provider %d; want 1 and 0", v1prov.count(), v2prov.count())
		}

		grant := g.post("/v1/grants", acme.admin, map[string]any{"biomeId": "ticketing", "version": "1.0.1",
			"digestHash": str(sub2.Body, "digest.hash")})
		expect(t, grant, http.StatusCreated)
		expect(t, g.post("/v1/capabilities/invoke", acme.bot, commentCall()), http.StatusOK)
		if v2prov.count() != 1 {
			t.Fatalf("after 1.0.1 was granted the v2 provider got %d calls, want 1", v2prov.count())
		}

		// 1.0.0 granted again after 1.0.1: the pin (1.0.0) now differs from the catalog's
		// newest entry (1.0.1), and calls go back to 1.0.0's descriptor and provider.
		regrant := g.post("/v1/grants", acme.admin, map[string]any{"biomeId": "ticketing", "version": "1.0.0",
			"digestHash": str(sub1.Body, "digest.hash")})
		expect(t, regrant, http.StatusCreated)
		expect(t, g.post("/v1/capabilities/invoke", acme.bot, commentCall()), http.StatusAccepted)
		expect(t, g.post("/v1/capabilities/invoke", acme.bot, findCall()), http.StatusOK)
		if v1prov.count() != 2 || v2prov.count() != 1 {
			t.Fatalf("after 1.0.0 was granted again: v1 provider %d calls, v2 provider %d; want 2 and 1", v1prov.count(), v2prov.count())
		}
	})
}

// TestUnpublishedLooksUnknown: a seeded ref (submitted, never granted) answers invoke,
// describe, preflight and explain exactly as a ref that does not exist.
func TestUnpublishedLooksUnknown(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		prov := newProvider(t)
		acme := g.org("acme")
		expect(t, g.post("/v1/biomes", acme.admin, submission(t, biomeDir(t, "ticketing", prov.URL))), http.StatusCreated)
		for _, tok := range []string{acme.admin, acme.bot} {
			for _, tc := range []struct {
				path string
				body func(ref string) map[string]any
			}{
				{"/v1/capabilities/invoke", func(ref string) map[string]any {
					return map[string]any{"ref": ref, "input": map[string]any{"customerEmail": "a@example.com"}}
				}},
				{"/v1/capabilities/describe", func(ref string) map[string]any { return map[string]any{"refs": []string{ref}} }},
				{"/v1/capabilities/preflight", func(ref string) map[string]any { return map[string]any{"ref": ref} }},
				{"/v1/capabilities/explain", func(ref string) map[string]any {
					return map[string]any{"capabilityRef": ref, "denialCode": "NOT_PUBLISHED"}
				}},
			} {
				got := g.post(tc.path, tok, tc.body("ticket:find@1"))
				want := g.post(tc.path, tok, tc.body("ticket:nothing@1"))
				sameAnswer(t, tc.path, got, want, "ticketing", "seeded", "internal")
			}
		}
		if prov.count() != 0 {
			t.Fatalf("a seeded ref reached its provider %d times", prov.count())
		}
	})
}

func findCall() map[string]any {
	return map[string]any{"ref": "ticket:find@1", "input": map[string]any{"customerEmail": "ada@example.com"}}
}

// sameAnswer fails unless got answers like want (status and code) and mentions none of leaks.
func sameAnswer(t *testing.T, what string, got, want response, leaks ...string) {
	t.Helper()
	if got.Status != want.Status || str(got.Body, "code") != str(want.Body, "code") {
		t.Errorf("%s: hidden ref answered %d %s, unknown ref %d %s", what, got.Status, got.Raw, want.Status, want.Raw)
	}
	for _, l := range leaks {
		if strings.Contains(string(got.Raw), l) {
			t.Errorf("%s: answer names %q: %s", what, l, got.Raw)
		}
	}
}

func editJSON(t *testing.T, path string, edit func(doc map[string]any)) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	edit(doc)
	out, _ := json.MarshalIndent(doc, "", "  ")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func setCommentApproval(t *testing.T, dir string, on bool) {
	editJSON(t, filepath.Join(dir, "contributions", "comment.capability.contribution.json"), func(doc map[string]any) {
		doc["manifest"].(map[string]any)["requiresApproval"] = on
	})
}

func bumpVersion(t *testing.T, dir, version string) {
	editJSON(t, filepath.Join(dir, "biome.json"), func(doc map[string]any) { doc["version"] = version })
}
