package main

import (
	"bytes"
	"errors"
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
