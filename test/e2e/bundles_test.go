package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/xemahq/xema/internal/policy/opatest"
)

// TestDemoBundleStockOPA builds the demo bundle as `make bundle` does (xema bundle build from
// bundles/demo/data.json) and has a stock opa of the go.mod version load it and decide: the
// agent's page read in project is allowed on revision "demo", the public session's workflow
// start is denied.
func TestDemoBundleStockOPA(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the opa binary")
	}
	root := repoRoot(t)
	out := filepath.Join(t.TempDir(), "demo.tar.gz")
	build := exec.Command(xemaBinary(t), "bundle", "build", "-o", out,
		"--data", filepath.Join(root, "bundles", "demo", "data.json"), "--revision", "demo")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("xema bundle build: %v\n%s", err, b)
	}
	decide := func(input map[string]any) (allow bool, codes []string, revision string) {
		t.Helper()
		raw, _ := json.Marshal(input)
		in := filepath.Join(t.TempDir(), "input.json")
		if err := os.WriteFile(in, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(opatest.Binary(t), "eval", "--bundle", out, "--input", in, "--format", "json", "data.xema.authz.decision")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("opa eval on the demo bundle: %v\n%s", err, stderr.String())
		}
		var res struct {
			Result []struct {
				Expressions []struct {
					Value struct {
						Allow    bool   `json:"allow"`
						Revision string `json:"revision"`
						Reasons  []struct {
							Code string `json:"code"`
						} `json:"reasons"`
					} `json:"value"`
				} `json:"expressions"`
			} `json:"result"`
		}
		if err := json.Unmarshal(b, &res); err != nil || len(res.Result) != 1 || len(res.Result[0].Expressions) != 1 {
			t.Fatalf("opa eval answered %s (%v)", b, err)
		}
		v := res.Result[0].Expressions[0].Value
		for _, r := range v.Reasons {
			codes = append(codes, r.Code)
		}
		return v.Allow, codes, v.Revision
	}
	call := func(ref, env string) map[string]any {
		return map[string]any{"ref": ref, "subject": map[string]any{"kind": "agent", "ref": "agent:support-bot"},
			"org": "default", "environment": env, "armed": []string{"*"}, "resource": "welcome"}
	}
	if allow, codes, rev := decide(call("kb:page.read@1", "project")); !allow || rev != "demo" {
		t.Errorf("agent reads a page in project: allow %v %v on revision %q, want allowed on demo", allow, codes, rev)
	}
	if allow, codes, _ := decide(call("workflow:run.start@1", "public-session")); allow || !slices.Contains(codes, "ENVIRONMENT_NOT_ALLOWED") {
		t.Errorf("public session starts a workflow: allow %v %v, want ENVIRONMENT_NOT_ALLOWED", allow, codes)
	}
}
