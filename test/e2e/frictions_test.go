package e2e

import (
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The frictions a new operator hit, each fixed: paged JSON output is one document, since and
// until take durations or RFC 3339, ref globs are refused, GET / is the console, a wrong
// method is 405 with Allow, the start log names the console and the policy dir, why-denied's
// grammar, an unreadable --biomes stops the start, and migrate names XEMA_STORE's store.
func TestOperatorFrictions(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t), "--policy-dir", t.TempDir())
		admin := g.adminToken()
		agent := g.token("--subject", "agent:support-bot", "--env", "project")
		for range 5 {
			expect(t, g.post("/v1/capabilities/invoke", agent, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}}), http.StatusOK)
		}
		cli := []string{"--server", g.URL, "--token", admin}
		out, err := g.run(append([]string{"audit", "search", "--all", "--limit", "2", "--format", "json", "--since", "1h"}, cli...)...)
		var doc struct{ Records []json.RawMessage }
		if err != nil || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Records) < 5 {
			t.Fatalf("audit search --all --format json over pages of 2: %v\n%s", err, out)
		}
		if out, err := g.run(append([]string{"audit", "search", "--since", "yesterday"}, cli...)...); err == nil || !strings.Contains(out, "RFC 3339") {
			t.Fatalf("audit search --since yesterday: %v\n%s", err, out)
		}
		if r := g.get("/v1/audit?since=2h&until=1ms", admin); r.Status != http.StatusOK || len(r.Body["records"].([]any)) == 0 {
			t.Fatalf("GET /v1/audit with durations: %d %s", r.Status, r.Raw)
		}
		if r := g.get("/v1/audit?ref=kb:*", admin); r.Status != http.StatusBadRequest || !strings.Contains(string(r.Raw), "globs are not supported") {
			t.Fatalf("a ref glob: %d %s", r.Status, r.Raw)
		}
		if out, err := g.run(append([]string{"replay", "--data-dir", g.DataDir, "--since", "2026-01-01T00:00:00Z", "--until", "1s"}, storeArgs(g)...)...); err != nil {
			t.Fatalf("replay with an RFC 3339 --since and a duration --until: %v\n%s", err, out)
		}

		noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := noRedirect.Get(g.URL + "/")
		if err != nil || resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/console/" {
			t.Fatalf("GET /: %v %v", resp, err)
		}
		resp.Body.Close()
		wrong := g.get("/v1/capabilities/invoke", agent)
		if wrong.Status != http.StatusMethodNotAllowed || wrong.Header.Get("Allow") != "POST" {
			t.Fatalf("GET on a POST route: %d Allow %q %s", wrong.Status, wrong.Header.Get("Allow"), wrong.Raw)
		}
		if r := g.get("/v1/nothing-here", agent); r.Status != http.StatusNotFound {
			t.Fatalf("an unknown path: %d %s", r.Status, r.Raw)
		}
		if logs := g.logs.String(); !strings.Contains(logs, "console="+g.URL+"/console/") || !strings.Contains(logs, "policy-dir=") {
			t.Fatalf("the start log names no console URL or policy dir:\n%s", logs)
		}
		allowed := g.get("/v1/audit?decision=allowed&limit=1", admin)
		id := str(allowed.Body["records"].([]any)[0].(map[string]any), "auditId")
		if r := g.get("/v1/audit/"+id+"/why-denied", admin); r.Status != http.StatusConflict || strings.Contains(string(r.Raw), "is a allowed") {
			t.Fatalf("why-denied of an allowed call: %d %s", r.Status, r.Raw)
		}
	})
}

// storeArgs names the gateway's store for a CLI command reading it directly.
func storeArgs(g *gateway) []string {
	if g.Store == "" {
		return nil
	}
	return []string{"--store", g.Store}
}

func TestStartRefusesUnreadableBiomes(t *testing.T) {
	bin := xemaBinary(t)
	out, err := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--biomes", filepath.Join(t.TempDir(), "missing")).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "--biomes") {
		t.Fatalf("serve --biomes MISSING: %v\n%s; want exit 2 naming --biomes", err, out)
	}
}

func TestMigrateNamesTheEnvironmentsStore(t *testing.T) {
	bin := xemaBinary(t)
	cmd := exec.Command(bin, "migrate", "--data-dir", t.TempDir())
	cmd.Env = append(cmd.Environ(), "XEMA_STORE=postgres://xema:secret@127.0.0.1:1/xema?connect_timeout=1")
	out, _ := cmd.CombinedOutput()
	if strings.Contains(string(out), "sqlite") || strings.Contains(string(out), "secret") {
		t.Fatalf("migrate with XEMA_STORE named the wrong store or its password:\n%s", out)
	}
}
