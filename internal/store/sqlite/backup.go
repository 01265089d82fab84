package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/xemahq/xema/internal/store"
)

// Backup writes a consistent copy of the database at path to dest (which must not exist)
// while other connections, a serving gateway's among them, keep writing: VACUUM INTO reads
// one snapshot of the WAL-mode database in a read transaction of its own connection, which
// holds no write lock. The copy is written aside and linked into place once whole and synced.
// It holds all the store holds (held calls' inputs and outputs, idempotency bodies, the audit
// log, the wrapped keys), so it is the owner's alone (0600) from its first byte: SQLite would
// create it 0644 less the umask, so an empty file is created 0600 first, which VACUUM INTO
// fills (it accepts an empty target).
func Backup(ctx context.Context, path, dest string) error {
	if err := checkPath(dest); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if _, err := os.Lstat(dest); err == nil {
		return fmt.Errorf("backup %s: %w: the file exists; name a new one", dest, store.ErrInvalid)
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("backup: %w: %w", store.ErrUnavailable, err)
	}
	db, err := openDB(path)
	if err != nil {
		return err
	}
	defer db.Close()
	tmp := filepath.Join(filepath.Dir(dest), "."+filepath.Base(dest)+".partial")
	_ = os.Remove(tmp) // a previous backup cut short
	if err := createPrivate(tmp); err != nil {
		return fmt.Errorf("backup %s: %w", dest, err)
	}
	defer os.Remove(tmp)
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, tmp); err != nil {
		return fmt.Errorf("backup %s: %w", path, err)
	}
	if err := checkFile(ctx, tmp); err != nil {
		return err
	}
	if err := syncFile(tmp); err != nil {
		return err
	}
	if err := os.Link(tmp, dest); err != nil {
		return fmt.Errorf("backup %s: %w", dest, err)
	}
	return syncFile(filepath.Dir(dest))
}

// Restore copies the backup at from to path (which must not exist: restoring never
// overwrites a store) after checking its integrity; the next Open migrates it if needed.
func Restore(ctx context.Context, from, path string) error {
	if err := checkPath(path); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("restore into %s: %w: a store exists there; restore into a fresh data directory", path, store.ErrInvalid)
	}
	if err := checkFile(ctx, from); err != nil {
		return err
	}
	b, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("restore: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("restore: %w", err)
	}
	return f.Close()
}

// createPrivate creates path empty, 0600 whatever the umask, failing if anything is there
// (O_EXCL: not through a link planted in its place).
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// checkFile runs SQLite's integrity check on the file at path, read-only.
func checkFile(ctx context.Context, path string) error {
	if err := checkPath(path); err != nil {
		return err
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%w: %w", store.ErrInvalid, err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	defer db.Close()
	var verdict string
	if err := db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&verdict); err != nil {
		return fmt.Errorf("check %s: %w: not a SQLite database: %w", path, store.ErrInvalid, err)
	}
	if verdict != "ok" {
		return fmt.Errorf("check %s: %w: integrity check: %s", path, store.ErrInvalid, verdict)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil {
		return fmt.Errorf("check %s: %w: not a xema store: %w", path, store.ErrInvalid, err)
	}
	return nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("backup: %w", err)
	}
	return nil
}
