package e2e

import (
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

		// A caller the grant does not cover is offered the exact grant.
		other := g.token("--subject", "agent:other", "--env", "public-session")
		r = g.post("/v1/capabilities/explain", other, map[string]any{"capabilityRef": "workflow:run.start@1", "denialCode": "ENVIRONMENT_NOT_ALLOWED"})
		expect(t, r, http.StatusOK)
		if perms, _ := r.Body["permissions"].([]any); len(perms) != 1 {
			t.Fatalf("explain for a missing grant: %s", r.Raw)
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
	expect(t, g.post("/v1/capabilities/invoke", agent, call), http.StatusOK)
	expect(t, g.get("/readyz", ""), http.StatusOK)
}
