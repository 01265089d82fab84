package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/xemahq/xema/internal/store"
)

// TestBackupRefusesCutPaths: a backup or restore path holding '?' or '#' would be cut there
// by the driver's connection string, so the integrity check would read another file (a
// restore from "b.db#1" checked "b.db" and copied bytes nobody checked). Each is refused by
// name before anything is read or written.
func TestBackupRefusesCutPaths(t *testing.T) {
	ctx := context.Background()
	newStore := func(t *testing.T, path string) {
		t.Helper()
		st, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	for _, tc := range []struct {
		name string
		run  func(dir, src string) error
		made string // the file the refused call must not have made
	}{
		{"backup to a path with a question mark", func(dir, src string) error { return Backup(ctx, src, filepath.Join(dir, "b?mode=rw.db")) }, "b?mode=rw.db"},
		{"backup to a path with a hash", func(dir, src string) error { return Backup(ctx, src, filepath.Join(dir, "b#1.db")) }, "b#1.db"},
		{"restore from a path with a hash beside a valid store", func(dir, src string) error {
			// b.db is a valid store, b.db#1 is not: without the check, b.db was checked and
			// b.db#1 restored.
			newStore(t, filepath.Join(dir, "b.db"))
			if err := os.WriteFile(filepath.Join(dir, "b.db#1"), []byte("not a database"), 0o600); err != nil {
				t.Fatal(err)
			}
			return Restore(ctx, filepath.Join(dir, "b.db#1"), filepath.Join(dir, "restored.db"))
		}, "restored.db"},
		{"restore into a path with a question mark", func(dir, src string) error { return Restore(ctx, src, filepath.Join(dir, "r?x.db")) }, "r?x.db"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "xema.db")
			newStore(t, src)
			err := tc.run(dir, src)
			if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "hold no '?' or '#'") {
				t.Fatalf("got %v, want the path refused by name", err)
			}
			if _, err := os.Lstat(filepath.Join(dir, tc.made)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s was made: %v", tc.made, err)
			}
		})
	}
	dir := t.TempDir()
	newStore(t, filepath.Join(dir, "xema.db"))
	if err := Backup(ctx, filepath.Join(dir, "xema.db"), filepath.Join(dir, "ok.db")); err != nil {
		t.Fatalf("a plain path: %v", err)
	}
}

// TestBackupIsPrivate: a backup holds all the store holds, so it is written 0600 under the
// usual umask 022 (SQLite alone creates 0644), as is a store restored from it; no partial
// file is left beside it.
func TestBackupIsPrivate(t *testing.T) {
	old := syscall.Umask(0o022) // the usual umask, whatever the test runner's
	t.Cleanup(func() { syscall.Umask(old) })
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join(dir, "xema.db")
	st, err := Open(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	backup := filepath.Join(dir, "backups", "b.db")
	if err := os.Mkdir(filepath.Dir(backup), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Backup(ctx, src, backup); err != nil {
		t.Fatal(err)
	}
	restored := filepath.Join(dir, "restored", "xema.db")
	if err := Restore(ctx, backup, restored); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{backup, restored} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want mode 0600", path, fi.Mode().Perm(), err)
		}
	}
	if entries, _ := os.ReadDir(filepath.Dir(backup)); len(entries) != 1 {
		t.Errorf("%d files beside the backup, want it alone", len(entries))
	}
}

// TestRestoreRefusesDamagedBackups: restore checks what it is given before copying it, and
// refuses with the check's own verdict (known answers: SQLite's integrity check on a page
// whose type byte was overwritten names that page), restoring nothing, a backup damaged
// at rest, a SQLite file that is no xema store, and a file that is no database.
func TestRestoreRefusesDamagedBackups(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src, backup := filepath.Join(dir, "xema.db"), filepath.Join(dir, "b.db")
	st, err := Open(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := Backup(ctx, src, backup); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+backup+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	var pageSize, root int
	if err := db.QueryRow(`PRAGMA page_size`).Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	// The audit log's index: a page no read of schema_migrations touches, so only the
	// integrity check sees it.
	if err := db.QueryRow(`SELECT rootpage FROM sqlite_schema WHERE name = 'sqlite_autoindex_audit_log_1'`).Scan(&root); err != nil {
		t.Fatal(err)
	}
	db.Close()
	good, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Clone(good)
	damaged[(root-1)*pageSize] = 0x07 // no b-tree page type

	other := filepath.Join(dir, "other.db")
	odb, err := sql.Open("sqlite", other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := odb.Exec(`CREATE TABLE notes (body TEXT)`); err != nil {
		t.Fatal(err)
	}
	odb.Close()

	for _, tc := range []struct {
		name string
		file func(path string) error
		want string
	}{
		{"a page damaged", func(p string) error { return os.WriteFile(p, damaged, 0o600) },
			fmt.Sprintf("integrity check: *** in database main ***\nTree %d page %d: btreeInitPage() returns error code 11", root, root)},
		{"another application's database", func(p string) error { return os.Link(other, p) }, "not a xema store"},
		{"no database", func(p string) error { return os.WriteFile(p, []byte("# xema master key\n"), 0o600) }, "not a SQLite database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, to := filepath.Join(t.TempDir(), "from.db"), filepath.Join(t.TempDir(), "restored", "xema.db")
			if err := tc.file(from); err != nil {
				t.Fatal(err)
			}
			err := Restore(ctx, from, to)
			if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("restore: %v; want refused with %q", err, tc.want)
			}
			if _, err := os.Lstat(to); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s was written: %v", to, err)
			}
		})
	}
	if err := Restore(ctx, backup, filepath.Join(t.TempDir(), "xema.db")); err != nil {
		t.Fatalf("the undamaged backup: %v", err)
	}
}
