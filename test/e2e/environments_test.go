package e2e

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// helpExample returns the command line of a command's --help example (its lines joined at
// the trailing backslashes), without the leading "xema".
func helpExample(t *testing.T, g *gateway, args ...string) []string {
	t.Helper()
	out, err := g.run(append(args, "--help")...)
	if err != nil {
		t.Fatalf("%v --help: %v\n%s", args, err, out)
	}
	_, ex, ok := strings.Cut(out, "Examples:\n")
	if !ok {
		t.Fatalf("%v --help has no example:\n%s", args, out)
	}
	ex, _, _ = strings.Cut(ex, "\n\n")
	fields := strings.Fields(strings.ReplaceAll(ex, "\\\n", " "))
	if len(fields) < 2 || fields[0] != "xema" {
		t.Fatalf("example %q does not run xema", ex)
	}
	return fields[1:]
}

// Named environments come from the config file (environments: {prod: project, ...}): the
// `xema grant create --help` example granting them works as written, tokens naming them are
// decided by their kind, and unknown names are refused listing the configured ones, by the
// grant API and by the policy. A bad environment in the config stops the start with exit 2.
func TestNamedEnvironments(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		prov := newProvider(t)
		cfg := filepath.Join(t.TempDir(), "xema.yaml")
		if err := os.WriteFile(cfg, []byte("environments: {prod: project, staging: project}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		g := startGateway(t, e.store(t), "--config", cfg)
		admin := g.adminToken()
		sub := g.post("/v1/biomes", admin, submission(t, biomeDir(t, "ticketing", prov.URL)))
		expect(t, sub, http.StatusCreated)

		example := helpExample(t, g, "grant", "create")
		out, err := g.run(append(example, "--server", g.URL, "--token", admin)...)
		if err != nil || !strings.Contains(out, "profile internal-agent") {
			t.Fatalf("the grant create --help example %v: %v\n%s", example, err, out)
		}

		ticket := `{"ref":"ticket:create@1","input":` + validTicket + `}}`
		support := func(env string) string {
			return g.token("--subject", "agent:support-bot", "--group", "support", "--env", env)
		}
		for _, env := range []string{"prod", "staging"} {
			r := g.post("/v1/capabilities/invoke", support(env), ticket)
			if r.Status != http.StatusAccepted {
				t.Fatalf("ticket:create@1 in %s (granted there, with approval): %d %s", env, r.Status, r.Raw)
			}
			// Of kind project: the profile's other capabilities reach it too.
			expect(t, g.post("/v1/capabilities/invoke", support(env), commentCall()), http.StatusOK)
		}
		if r := g.post("/v1/capabilities/invoke", support("project"), ticket); r.Status != http.StatusForbidden {
			t.Fatalf("ticket:create@1 in project (not granted there): %d %s", r.Status, r.Raw)
		}
		r := g.post("/v1/capabilities/invoke", support("qa"), commentCall())
		if r.Status != http.StatusForbidden || !strings.Contains(string(r.Raw), "environment qa is not defined (defined: ") ||
			!strings.Contains(string(r.Raw), "prod") || !strings.Contains(string(r.Raw), "staging") {
			t.Fatalf("a token of an unknown environment: %d %s", r.Status, r.Raw)
		}

		bad := g.post("/v1/grants?dryRun=true", admin, map[string]any{"biomeId": "ticketing", "version": "1.0.0",
			"digestHash": str(sub.Body, "digest.hash"), "customize": map[string]any{commentRef: map[string]any{"environments": []string{"qa"}}}})
		if bad.Status != http.StatusBadRequest || str(bad.Body, "code") != "UNKNOWN_ENVIRONMENT" ||
			!strings.Contains(string(bad.Raw), "prod") || !strings.Contains(string(bad.Raw), "staging") {
			t.Fatalf("a grant naming an unknown environment: %d %s", bad.Status, bad.Raw)
		}

		// Replay decides with the deployment's environments: from serve's config file or
		// --environments, the recorded calls in prod and staging re-decide as they were.
		replay := func(args ...string) (string, int) {
			return g.cli(t, append(append([]string{"replay", "--since", "1h", "--format", "json"}, args...), g.storeArgs()...)...)
		}
		for _, args := range [][]string{{"--config", cfg}, {"--environments", "prod=project,staging=project"}} {
			out, code := replay(args...)
			if code != 0 || !strings.Contains(out, `"changes": []`) || strings.Contains(out, `"considered": 0,`) {
				t.Fatalf("replay %v (exit %d): want no change\n%s", args, code, out)
			}
		}
		// Without them the calls in prod and staging re-decide as denied, and replay says why.
		if out, err := g.run(append([]string{"replay", "--since", "1h", "--format", "json"}, g.storeArgs()...)...); err != nil || !strings.Contains(out, "ENVIRONMENT_NOT_ALLOWED") ||
			!strings.Contains(out, "recorded calls in environments replay does not define (prod, staging)") {
			t.Fatalf("replay without the deployment's environments (%v): want changes and a warning naming prod and staging\n%s", err, out)
		}
		for _, args := range [][]string{{"--environments", "prod=nope"}, {"--environments", "prod"}, {"--config", "/nonexistent.yaml"}} {
			if out, code := replay(args...); code != 2 {
				t.Errorf("replay %v: exit %d, want 2: %s", args, code, out)
			}
		}
	})
}

func TestNamedEnvironmentsRefusedAtStart(t *testing.T) {
	bin := xemaBinary(t)
	for _, tc := range []struct{ name, config, want string }{
		{"unknown kind", "environments: {prod: production}\n", `unknown kind "production"`},
		{"bad name", "environments: {Prod: project}\n", "name must match"},
		{"default redefined", "environments: {public: sandbox}\n", "already of kind"},
		{"not a mapping of names", "environments: [prod]\n", "want NAME=KIND"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "xema.yaml")
			if err := os.WriteFile(cfg, []byte(tc.config), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--config", cfg)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "--environments") || !strings.Contains(string(out), tc.want) {
				t.Fatalf("serve with %q: %v\n%s\nwant exit 2 naming --environments and %q", tc.config, err, out, tc.want)
			}
		})
	}
	out, err := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--environments", "prod").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "want NAME=KIND") {
		t.Fatalf("serve --environments prod: %v\n%s", err, out)
	}
}
