package main

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/app"
	"github.com/xemahq/xema/internal/masterkey"
	"github.com/xemahq/xema/internal/store"
)

// xema runs the command line with args and returns what it printed, its error's text
// included, and its exit status.
func xema(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		return out.String() + "error: " + err.Error(), exitCode(err)
	}
	return out.String(), 0
}

// TestRestoreVerifiesAuditChains: restore verifies the audit chains of what it restored with
// the deployment's master key and says so; a record altered in the backup is a break (exit
// 1, named); without the master key, or with another deployment's, it says the chains were
// not verified and why, never that they were, and generates no master key.
func TestRestoreVerifiesAuditChains(t *testing.T) {
	t.Setenv(masterkey.EnvKey, "")
	t.Setenv(masterkey.EnvKeyFile, "")
	ctx := context.Background()
	src := t.TempDir()
	a, err := app.New(ctx, app.Config{DataDir: src})
	if err != nil {
		t.Fatal(err)
	}
	const altered = "inv_restore_test_1"
	for _, id := range []string{altered, "inv_restore_test_2"} {
		if err := a.Audit.Append(ctx, store.AuditRecord{ID: id, Time: time.Now(), Org: "default", Ref: "kb:page.read@1",
			SubjectKind: "agent", SubjectRef: "agent:bot", Environment: "project", Decision: "allowed"}); err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
	backup := filepath.Join(t.TempDir(), "b.db")
	if out, code := xema(t, "backup", "--data-dir", src, "--to", backup); code != 0 {
		t.Fatalf("backup: exit %d: %s", code, out)
	}
	tampered := filepath.Join(t.TempDir(), "tampered.db")
	raw, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tampered, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", tampered)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP TRIGGER audit_log_no_update`, `UPDATE audit_log SET decision = 'denied' WHERE id = '` + altered + `'`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	otherKey := filepath.Join(t.TempDir(), "other", masterkey.FileName)
	if _, err := (masterkey.Source{DataDir: filepath.Dir(otherKey)}).Open(true); err != nil {
		t.Fatal(err)
	}
	master := filepath.Join(src, masterkey.FileName)

	for _, tc := range []struct {
		name      string
		from      string
		args      []string
		keyInDir  bool // the master key copied into the new data directory first
		code      int
		want, not []string
	}{
		{"the master key in the data directory", backup, nil, true, 0, []string{"audit log verified intact: 1 chain(s), 2 chained record(s)"}, []string{"NOT"}},
		{"--master-key-file", backup, []string{"--master-key-file", master}, false, 0, []string{"audit log verified intact: 1 chain(s)"}, []string{"NOT"}},
		{"no master key", backup, nil, false, 0, []string{"audit chains NOT verified", masterkey.FileName + " does not exist"}, []string{"intact"}},
		{"another deployment's master key", backup, []string{"--master-key-file", otherKey}, false, 0, []string{"audit chains NOT verified", "wrong master key"}, []string{"intact"}},
		{"a record altered in the backup", tampered, []string{"--master-key-file", master}, false, 1, []string{"BROKEN:", altered, "audit log not intact"}, []string{"verified intact"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.keyInDir {
				if err := os.WriteFile(filepath.Join(dir, masterkey.FileName), mustRead(t, master), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			out, code := xema(t, append([]string{"restore", "--from", tc.from, "--data-dir", dir}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out, n) {
					t.Errorf("output has %q:\n%s", n, out)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, masterkey.FileName)); !tc.keyInDir && err == nil {
				t.Errorf("restore created %s", masterkey.FileName)
			}
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
