package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// violationPaths lists the JSON pointers of a 400's violations.
func violationPaths(r response) []string {
	vs, _ := r.Body["violations"].([]any)
	out := []string{}
	for _, v := range vs {
		if m, ok := v.(map[string]any); ok {
			out = append(out, fmt.Sprint(m["path"]))
		}
	}
	return out
}

func hasPath(r response, path string) bool {
	for _, p := range violationPaths(r) {
		if p == path {
			return true
		}
	}
	return false
}

// TestStdioCommandLineRefused: nothing the API accepts runs on the host. A command line in
// POST /v1/mcp-servers (command, args or env) is a 400 naming its pointer, an undeclared
// stdio id is a 400 on /providerId; nothing is stored and the marker the command would
// have written never appears. Only the operator's declaration runs.
func TestStdioCommandLineRefused(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		dir := t.TempDir()
		declaredMarker := filepath.Join(dir, "declared-ran")
		config := filepath.Join(dir, "stdio.json")
		raw, _ := json.Marshal([]map[string]any{{"id": "declared", "command": "/bin/sh", "args": []string{"-c", "touch " + declaredMarker}}})
		if err := os.WriteFile(config, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		g := startGateway(t, e.store(t), "--mcp-stdio-config", config)
		admin := g.adminToken()
		marker := filepath.Join(dir, "pwned")
		shell := []string{"-c", "touch " + marker}
		for _, tc := range []struct {
			name, path string
			body       map[string]any
		}{
			{"command and args", "/command", map[string]any{"providerId": "evil", "transport": "stdio", "command": "/bin/sh", "args": shell}},
			{"command of a declared id", "/command", map[string]any{"providerId": "declared", "transport": "stdio", "command": "/bin/sh", "args": shell}},
			{"args alone", "/args", map[string]any{"providerId": "declared", "transport": "stdio", "args": shell}},
			{"env alone", "/env", map[string]any{"providerId": "declared", "transport": "stdio", "env": map[string]any{"LD_PRELOAD": marker}}},
			{"command on an http server", "/command", map[string]any{"providerId": "evil", "transport": "streamable-http", "url": "http://127.0.0.1:1/mcp", "command": "/bin/sh"}},
			{"undeclared stdio id", "/providerId", map[string]any{"providerId": "evil", "transport": "stdio"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := g.post("/v1/mcp-servers", admin, tc.body)
				if r.Status != http.StatusBadRequest || str(r.Body, "code") != "INVALID_MCP_SERVER" || !hasPath(r, tc.path) {
					t.Fatalf("got %d %s, want 400 INVALID_MCP_SERVER naming %s", r.Status, r.Raw, tc.path)
				}
				if _, err := os.Stat(marker); err == nil {
					t.Fatal("the command in the body ran on the gateway host")
				}
			})
		}
		list := g.get("/v1/mcp-servers", admin)
		expect(t, list, http.StatusOK)
		if strings.Contains(string(list.Raw), `"evil"`) || strings.Contains(string(list.Raw), `"declared"`) {
			t.Fatalf("a refused registration was stored: %s", list.Raw)
		}
		if _, err := os.Stat(declaredMarker); err == nil {
			t.Fatal("the declared server ran before anyone registered it")
		}
		// The operator's declaration is what runs: it exits at once (not an MCP server), a
		// typed 502, and its own marker shows it was the declared command line.
		r := g.post("/v1/mcp-servers", admin, map[string]any{"providerId": "declared", "transport": "stdio"})
		if r.Status != http.StatusBadGateway || str(r.Body, "code") != "PROVIDER_UNREACHABLE" {
			t.Fatalf("declared server: %d %s", r.Status, r.Raw)
		}
		if _, err := os.Stat(declaredMarker); err != nil {
			t.Fatalf("the declared command line did not run: %v", err)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the body's command ran")
		}
	})
}

// TestStdioFlagsChecked: a malformed declaration stops xema serve before it listens.
func TestStdioFlagsChecked(t *testing.T) {
	g := &gateway{t: t, bin: xemaBinary(t), DataDir: t.TempDir()}
	for _, args := range [][]string{
		{"--mcp-stdio", "no-command="},
		{"--mcp-stdio", "Bad_Id=/bin/true"},
		{"--mcp-stdio", "a=/bin/true", "--mcp-stdio", "a=/bin/false"},
		{"--egress-allow", "not-a-cidr"},
		{"--bundle-reader", "opa-sidecar"},
	} {
		out, err := g.run(append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", g.DataDir}, args...)...)
		if err == nil {
			t.Errorf("xema serve %v started", args)
		} else if !strings.Contains(out, args[len(args)-2]) && !strings.Contains(out, "declared twice") {
			t.Errorf("xema serve %v: error does not name the flag: %s", args, out)
		}
	}
}
