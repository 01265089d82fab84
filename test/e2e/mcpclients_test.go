package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// docBlock returns the fenced block of docs/file that follows the line <!-- marker ... -->.
func docBlock(t *testing.T, file, marker string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", file))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(marker) + "(?: [^>]*)?-->\n```[a-z]*\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatalf("docs/%s has no %s block", file, marker)
	}
	return string(m[1])
}

// docShell runs a shell block of a doc in dir with bash, with env added to the test's
// environment, and returns its output; a failing block fails the test.
func docShell(t *testing.T, dir, script string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v running\n%s\noutput:\n%s", err, script, out)
	}
	return string(out)
}

// npxShim is a directory holding an `npx` that runs the package a doc names from the peers
// test/peers pins, never the registry: `npx -y [@SCOPE/]PKG@V ARGS...` runs PKG's bin.
func npxShim(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	script := `#!/bin/sh
[ "$1" = -y ] && shift
bin=${1%@*}; bin=${bin##*/}; shift
exec "` + filepath.Join(npmPeers(t), "node_modules", ".bin") + `/$bin" "$@"
`
	if err := os.WriteFile(filepath.Join(dir, "npx"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestMCPClientRecipes runs docs/mcp-clients.md's recipes as written against a gateway
// started as `make run` starts it: the TypeScript and Go SDKs with the bearer header, the
// Inspector's CLI, the desktop hosts' configurations (Claude Desktop's stdio bridge run as the
// host runs it; VS Code's URL and header), and the Tasks declaration by hand.
func TestMCPClientRecipes(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "node", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the recipes need %s: %v", tool, err)
		}
	}
	g := startGateway(t, "")
	token := g.token("--subject", "agent:support-bot", "--env", "project")
	env := []string{"SERVER=" + g.URL, "TOKEN=" + token, "HOME=" + t.TempDir(),
		"PATH=" + npxShim(t) + string(os.PathListSeparator) + os.Getenv("PATH")}
	modules := filepath.Join(npmPeers(t), "node_modules")
	welcome := `\"title\":\"Welcome\"`

	t.Run("typescript", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "connect.mjs"), []byte(docBlock(t, "mcp-clients.md", "recipe:typescript")), 0o644); err != nil {
			t.Fatal(err)
		}
		out := docShell(t, dir, docBlock(t, "mcp-clients.md", "recipe:typescript-run"), env...)
		if !strings.Contains(out, "xema_capabilities_invoke") || !strings.Contains(out, `"title":"Welcome"`) {
			t.Fatalf("connect.mjs: %s; want the tools and the page", out)
		}
	})

	t.Run("go", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(docBlock(t, "mcp-clients.md", "recipe:go")), 0o644); err != nil {
			t.Fatal(err)
		}
		// The recipe's HOME is a temporary one: the go command keeps this machine's caches.
		caches, err := exec.Command("go", "env", "GOMODCACHE", "GOCACHE").Output()
		if err != nil {
			t.Fatal(err)
		}
		dirs := strings.Fields(string(caches))
		out := docShell(t, dir, docBlock(t, "mcp-clients.md", "recipe:go-run"),
			append(env, "GOMODCACHE="+dirs[0], "GOCACHE="+dirs[1], "GOWORK=off", "GOFLAGS=")...)
		if !strings.Contains(out, "false "+`{"output":`) || !strings.Contains(out, `"title":"Welcome"`) {
			t.Fatalf("go run: %s; want the page, not an error", out)
		}
	})

	t.Run("inspector", func(t *testing.T) {
		out := docShell(t, t.TempDir(), docBlock(t, "mcp-clients.md", "recipe:inspector"), env...)
		if !strings.Contains(out, `"name": "xema_capabilities_invoke"`) || !strings.Contains(out, welcome) {
			t.Fatalf("inspector: %s; want tools/list and the page", out)
		}
	})

	t.Run("claude desktop", func(t *testing.T) {
		var cfg struct {
			MCPServers map[string]struct {
				Command string            `json:"command"`
				Args    []string          `json:"args"`
				Env     map[string]string `json:"env"`
			} `json:"mcpServers"`
		}
		if err := json.Unmarshal([]byte(docBlock(t, "mcp-clients.md", "recipe:claude-desktop")), &cfg); err != nil {
			t.Fatal(err)
		}
		srv := cfg.MCPServers["xema"]
		args := make([]string, len(srv.Args))
		for i, a := range srv.Args {
			args[i] = strings.Replace(a, "http://localhost:8181", g.URL, 1)
		}
		cmd := exec.Command(srv.Command, args...)
		cmd.Env = append(os.Environ(), env...)
		for k, v := range srv.Env {
			cmd.Env = append(cmd.Env, k+"="+strings.Replace(v, "<token from xema dev token>", token, 1))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// As a desktop host does: a protocol version of the stable specification, over stdio.
		s, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, nil).
			Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatalf("start %s %v: %v", srv.Command, args, err)
		}
		defer s.Close()
		body, isErr := callTool(t, s, "xema_capabilities_invoke", map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}})
		if isErr || str(body, "output.title") != "Welcome" {
			t.Fatalf("through the stdio bridge: %v; want the page", body)
		}
	})

	t.Run("vscode", func(t *testing.T) {
		var cfg struct {
			Servers map[string]struct {
				Type    string            `json:"type"`
				URL     string            `json:"url"`
				Headers map[string]string `json:"headers"`
			} `json:"servers"`
		}
		if err := json.Unmarshal([]byte(docBlock(t, "mcp-clients.md", "recipe:vscode")), &cfg); err != nil {
			t.Fatal(err)
		}
		srv := cfg.Servers["xema"]
		auth := strings.Replace(srv.Headers["Authorization"], "${input:xema-token}", token, 1)
		if srv.Type != "http" || srv.URL != "http://localhost:8181/mcp" || auth != "Bearer "+token || len(srv.Headers) != 1 {
			t.Fatalf("mcp.json: %+v; want an http server at make run's /mcp with the bearer header only", srv)
		}
		s, err := mcpSession(t, g, strings.TrimPrefix(auth, "Bearer "))
		if err != nil {
			t.Fatal(err)
		}
		if tools, err := s.ListTools(context.Background(), nil); err != nil || len(tools.Tools) != 6 {
			t.Fatalf("tools/list: %v %v; want the six meta-tools", tools, err)
		}
	})

	t.Run("tasks", func(t *testing.T) {
		out := docShell(t, t.TempDir(), docBlock(t, "mcp-clients.md", "recipe:tasks"), env...)
		answers := regexp.MustCompile(`(?m)^(?:data: )?(\{"jsonrpc".*)$`).FindAllStringSubmatch(out, -1)
		if len(answers) != 2 || !strings.Contains(answers[0][1], `"resultType":"task"`) || !strings.Contains(answers[0][1], `"taskId":"apr_`) ||
			!strings.Contains(answers[1][1], `"resultType":"complete"`) || !strings.Contains(answers[1][1], `"status":"working"`) {
			t.Fatalf("tasks recipe: %s; want a CreateTaskResult, then tasks/get working", out)
		}
		if r := g.get("/v1/approvals?status=pending", g.adminToken()); !strings.Contains(string(r.Raw), "kb:page.publish@1") {
			t.Fatalf("the held call is not pending: %s", r.Raw)
		}
	})
}
