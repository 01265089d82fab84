package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/policy/opatest"
)

// TestPlatformPolicyExample runs docs/platform-policy.md's test block as written, in bash
// from the repository's root, with xema and a stock opa of the embedded version on the PATH:
// examples/policies' tests pass under `xema policy test` (alone, and with the built-in
// policies' tests) and under stock `opa test` beside policies/.
func TestPlatformPolicyExample(t *testing.T) {
	bin := t.TempDir()
	for name, target := range map[string]string{"xema": xemaBinary(t), "opa": opatest.Binary(t)} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", docBlock(t, "platform-policy.md", "platformpolicy:test"))
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the doc's test block failed (%v):\n%s", err, out)
	}
	// Each run reports every test passed: the example's 6 alone, more with the built-in ones.
	passes := regexp.MustCompile(`(?m)^PASS: (\d+)/(\d+)$`).FindAllStringSubmatch(string(out), -1)
	if len(passes) != 3 || passes[0][1] != "6" || strings.Contains(string(out), "FAIL") {
		t.Fatalf("want three runs, the first of the example's 6 tests, none failing:\n%s", out)
	}
	for _, p := range passes[1:] {
		if p[1] != p[2] || len(p[1]) < 2 {
			t.Fatalf("a run beside the built-in policies did not pass them all:\n%s", out)
		}
	}
}

// TestPlatformPolicyExampleServes: the example served with --policy-dir denies the demo's
// workflow start to an agent in a public session with its own code (beside the grant's
// reason), and leaves the agent's reads in its project alone.
func TestPlatformPolicyExampleServes(t *testing.T) {
	g := startGateway(t, "", "--policy-dir", filepath.Join(repoRoot(t), "examples", "policies"))
	public := g.token("--subject", "agent:support-bot", "--env", "public-session")
	r := g.post("/v1/capabilities/invoke", public, map[string]any{"ref": "workflow:run.start@1", "input": map[string]any{"workflowId": "onboarding"}})
	expect(t, r, http.StatusForbidden)
	if !strings.Contains(string(r.Raw), `"code":"NO_AGENT_WRITES_IN_PUBLIC"`) ||
		!strings.Contains(string(r.Raw), "workflow:run.start@1 is a write capability; agents may not call it in environment public-session (kind public)") {
		t.Fatalf("the denial lacks the platform rule's reason: %s", r.Raw)
	}
	project := g.token("--subject", "agent:support-bot", "--env", "project")
	expect(t, g.post("/v1/capabilities/invoke", project, map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}}), http.StatusOK)
}
