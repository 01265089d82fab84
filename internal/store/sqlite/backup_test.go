package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/xemahq/xema/internal/store"
)

// TestBackupRefusesCutPaths: a backup or restore path holding '?' or '#' would be cut at it
// by the driver's connection string (the integrity check reading another file), so it is
// refused before anything is written.
func TestBackupRefusesCutPaths(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join(dir, "xema.db")
	st, err := Open(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	for _, tc := range []struct {
		name string
		run  func(p string) error
		path string
	}{
		{"backup to a '?' path", func(p string) error { return Backup(ctx, src, p) }, filepath.Join(dir, "b?mode=rw.db")},
		{"backup to a '#' path", func(p string) error { return Backup(ctx, src, p) }, filepath.Join(dir, "b#1.db")},
		{"restore from a '?' path", func(p string) error { return Restore(ctx, p, filepath.Join(dir, "restored.db")) }, src + "?mode=ro"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.run(tc.path); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if e.Name() != "xema.db" && e.Name() != "xema.db-wal" && e.Name() != "xema.db-shm" {
					t.Errorf("left %s behind", e.Name())
				}
			}
		})
	}
	if err := Backup(ctx, src, filepath.Join(dir, "ok.db")); err != nil {
		t.Fatalf("a plain path: %v", err)
	}
}
