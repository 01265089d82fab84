package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/identity"
)

func runDevToken(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := newDevTokenCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs(args)
	err := cmd.Execute()
	return strings.TrimSpace(out.String()), err
}

func TestDevTokenAcceptedByTheServersVerifier(t *testing.T) {
	dir := t.TempDir()
	tok, err := runDevToken(t, "--data-dir", dir, "--subject", "agent:support-bot", "--env", "project",
		"--group", "support", "--group", "ops", "--role", "reader", "--org-role", "org_admin", "--org", "acme",
		"--project", "p1", "--session", "s1", "--armed", "kb:*", "--armed", "connector:channel.send-message@1", "--ttl", "10m")
	if err != nil {
		t.Fatal(err)
	}
	// The verifier `xema serve --data-dir dir` builds.
	si, err := identity.NewServerIdentity(t.Context(), identity.ServerConfig{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer si.Close()
	ec, err := si.Verify(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	if ec.Subject.Ref != "agent:support-bot" || ec.Environment != "project" || len(ec.Groups) != 2 || ec.OrgRole != "org_admin" ||
		ec.Org != "acme" || ec.Project != "p1" || ec.Session != "s1" || len(ec.Armed) != 2 || ec.Armed[0] != "kb:*" {
		t.Fatalf("%+v", ec)
	}
	tok2, err := runDevToken(t, "--data-dir", dir, "--subject", "user:ada", "--env", "project")
	if err != nil {
		t.Fatal(err)
	}
	if ec, err := si.Verify(t.Context(), tok2); err != nil || len(ec.Armed) != 1 || ec.Armed[0] != "*" {
		t.Fatalf("no --armed means armed for all: %+v %v", ec, err)
	}
}

func TestDevTokenRejectsBadFlags(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--data-dir", dir, "--subject", "agent:x", "--env", "project"}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no subject":     {[]string{"--data-dir", dir, "--env", "project"}, "subject"},
		"no env":         {[]string{"--data-dir", dir, "--subject", "agent:x"}, "env"},
		"subject kind":   {[]string{"--data-dir", dir, "--subject", "bot:x", "--env", "p"}, "subject kind"},
		"subject shape":  {[]string{"--data-dir", dir, "--subject", "agent", "--env", "p"}, "KIND:NAME"},
		"org role":       {append(base, "--org-role", "owner"), "org role"},
		"zero ttl":       {append(base, "--ttl", "0s"), "ttl"},
		"negative ttl":   {append(base, "--ttl", "-1m"), "ttl"},
		"ttl over a day": {append(base, "--ttl", "25h"), "ttl"},
		"armed pattern":  {append(base, "--armed", "kb"), "armed pattern"},
		"empty armed":    {append(base, "--armed", ""), "armed pattern"},
		"extra argument": {append(base, "stray"), "unknown command"},
	} {
		t.Run(name, func(t *testing.T) {
			tok, err := runDevToken(t, tc.args...)
			if err == nil || tok != "" || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error mentioning %q and no token, got %q %v", tc.want, tok, err)
			}
		})
	}
	_, err := runDevToken(t, append(base, "--ttl", "0s")...)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 {
		t.Fatalf("a bad flag value exits 2: %v", err)
	}
}

// TestDevIssuerListensOnLoopbackOnly: the issuer hands a token to whoever asks, so an address
// beyond loopback is refused (exit 2, saying why) before any key is made; and dev token
// --issuer takes no --data-dir, whose key it would not use.
func TestDevIssuerListensOnLoopbackOnly(t *testing.T) {
	dir := t.TempDir()
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:8555", ":8555", "nonsense"} {
		out, code := xema(t, "dev", "issuer", "--addr", addr, "--data-dir", dir)
		if code != 2 || !strings.Contains(out, "--addr") {
			t.Errorf("dev issuer --addr %s: exit %d:\n%s", addr, code, out)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a refused start made %v", entries)
	}
	out, code := xema(t, "dev", "token", "--issuer", "http://127.0.0.1:1", "--data-dir", dir, "--subject", "agent:x", "--env", "project")
	if code != 2 || !strings.Contains(out, "--data-dir does not apply") {
		t.Fatalf("dev token --issuer --data-dir: exit %d:\n%s", code, out)
	}
}
