package app

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/masterkey"
)

// TestNoMasterKeyCreatedForAnExistingStore: a start without the master key against a store
// whose keys it wrapped creates no new master.key (it would open nothing and pass for the
// deployment's own), nor anything else in the data directory; the error names the file, the
// master key wanted and how to give it. Given back, the start succeeds.
func TestNoMasterKeyCreatedForAnExistingStore(t *testing.T) {
	t.Setenv(masterkey.EnvKey, "")
	t.Setenv(masterkey.EnvKeyFile, "")
	ctx := context.Background()
	dir := t.TempDir()
	a, err := New(ctx, Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	keyFile := filepath.Join(dir, masterkey.FileName)
	w, err := masterkey.Source{File: keyFile}.Open(false)
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(t.TempDir(), "master.key")
	if err := os.Rename(keyFile, moved); err != nil {
		t.Fatal(err)
	}
	listing := func() []string {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	before := listing()

	_, err = New(ctx, Config{DataDir: dir})
	if !errors.Is(err, masterkey.ErrNoMasterKey) {
		t.Fatalf("a start without the master key: %v, want %v", err, masterkey.ErrNoMasterKey)
	}
	for _, want := range []string{keyFile, w.ID(), "none was created", "--master-key-file"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not name %q", err, want)
		}
	}
	if after := listing(); !slices.Equal(before, after) {
		t.Fatalf("the data directory went from %v to %v; want nothing created", before, after)
	}

	a, err = New(ctx, Config{DataDir: dir, MasterKey: masterkey.Source{File: moved}})
	if err != nil {
		t.Fatalf("with the master key given back: %v", err)
	}
	a.Close()
}
