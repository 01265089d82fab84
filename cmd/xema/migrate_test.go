package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestMigrateCommand(t *testing.T) {
	dir := t.TempDir()
	run := func() string {
		t.Helper()
		var out bytes.Buffer
		cmd := newMigrateCmd()
		cmd.SetOut(&out)
		cmd.SetArgs([]string{"--data-dir", dir})
		if err := cmd.Execute(); err != nil {
			t.Fatalf("xema migrate: %v", err)
		}
		return out.String()
	}
	if got := run(); !strings.Contains(got, "applied 0001_init") {
		t.Fatalf("first run printed %q, want the applied migrations", got)
	}
	if got, want := run(), "up to date: sqlite "+filepath.Join(dir, "xema.db"); !strings.Contains(got, want) {
		t.Fatalf("second run printed %q, want %q", got, want)
	}
}

func TestMigrateCommandRefusesUnknownStore(t *testing.T) {
	cmd := newMigrateCmd()
	cmd.SetArgs([]string{"--store", "redis://localhost", "--data-dir", t.TempDir()})
	cmd.SetOut(&bytes.Buffer{})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "redis://localhost") {
		t.Fatalf("xema migrate --store redis://localhost = %v, want an error naming it", err)
	}
}
