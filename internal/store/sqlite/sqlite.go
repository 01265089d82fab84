// Package sqlite is the embedded store engine: one SQLite file through the pure-Go
// modernc.org/sqlite driver, in WAL mode, foreign keys on.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/sqlstore"
)

// Store is the SQLite engine of store.Store.
type Store struct {
	*sqlstore.Store
}

// Dialect is how SQLite differs: times are INTEGER microseconds, errors are sqlite codes.
var Dialect = sqlstore.Dialect{
	Name:           "sqlite",
	TimeArg:        func(t time.Time) any { return t.UnixMicro() },
	Classify:       classify,
	PrepareBatches: true,
	InsertOrFail:   true,
	// A prune's batch of 250 records frees a few hundred KB; a file in auto_vacuum INCREMENTAL
	// mode gives back up to 512 KB after each batch (a no-op in the default mode, whose file
	// reuses the freed pages), never in one long vacuum holding the writer.
	AfterPruneBatch: `PRAGMA incremental_vacuum(256)`,
	ReasonCodeMatch: `EXISTS (SELECT 1 FROM json_each(CASE WHEN json_type(reasons) = 'array' THEN reasons ELSE '[]' END) e
		WHERE json_extract(e.value, '$.code') = ?)`,
	Greatest: "max",
	Least:    "min",
}

// busyTimeout is how long a writer waits for another one before the store is unavailable.
const busyTimeout = 10 * time.Second

// Open opens (creating it 0600, and its directory 0700, if missing) the database file at
// path and applies pending migrations.
func Open(ctx context.Context, path string) (*Store, error) {
	db, err := openDB(path)
	if err != nil {
		return nil, err
	}
	if _, err := sqlstore.Migrate(ctx, db, Dialect); err != nil {
		_ = db.Close() // the migration error is the one to report
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	return &Store{sqlstore.New(db, Dialect)}, nil
}

// Migrate applies pending migrations to the database file at path and returns their versions.
func Migrate(ctx context.Context, path string) ([]string, error) {
	db, err := openDB(path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	applied, err := sqlstore.Migrate(ctx, db, Dialect)
	if err != nil {
		return applied, fmt.Errorf("migrate sqlite store %s: %w", path, err)
	}
	return applied, nil
}

// DSN is the driver's connection string for the file at path. Transactions begin
// IMMEDIATE so that concurrent writers queue on busy_timeout instead of failing to upgrade
// a read lock. Every commit is fsynced (synchronous FULL, SQLite's default made explicit): an
// audit record is durable when its Append returns. Temporary files stay in memory: a spilled
// statement journal of the audit INSERT cost a temporary file's writes in every batch (~10 %
// of an append's CPU). A new file gets pages of 2 KiB
// instead of 4: an audit batch dirties one or two pages of each of the audit log's b-trees,
// so its commit writes and fsyncs ~40 % fewer bytes (a batch of 8 records: 48 KB instead
// of 75 KB) for ~25 % more WAL frames, and an append's wall time was 15–20 % lower; an
// existing file keeps its page size (the pragma has no effect once a database has pages).
func DSN(path string) string {
	return "file:" + path + fmt.Sprintf("?_txlock=immediate&_busy_timeout=%d&_foreign_keys=1&_journal_mode=WAL&_synchronous=FULL"+
		"&_pragma=temp_store(memory)&_pragma=page_size(%d)", busyTimeout.Milliseconds(), pageSize)
}

// pageSize is the page size of a new database file (see DSN).
const pageSize = 2048

// checkPath refuses a path the driver's "file:" connection string would cut short: its query
// starts at the first '?', so "a?b.db" would open "a".
func checkPath(path string) error {
	if path == "" || strings.ContainsAny(path, "?#") {
		return fmt.Errorf("%w: sqlite path %q: must be non-empty and hold no '?' or '#'", store.ErrInvalid, path)
	}
	return nil
}

func openDB(path string) (*sql.DB, error) {
	if err := checkPath(path); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create sqlite store directory: %w: %w", store.ErrUnavailable, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w: %w", path, store.ErrUnavailable, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w: %w", path, store.ErrUnavailable, err)
	}
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w: %w", path, store.ErrUnavailable, err)
	}
	// SQLite has one writer at a time. With one connection, concurrent callers queue in
	// Go instead of sleeping in busy_timeout back-off (1 to 100 ms per retry), which is what
	// made the funnel's p99 on SQLite.
	db.SetMaxOpenConns(1)
	return db, nil
}

func classify(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return nil
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY,
		// RAISE of the append-only triggers (ABORT, or FAIL for a stored id: migration 0011).
		sqlite3.SQLITE_CONSTRAINT_TRIGGER:
		return store.ErrConflict
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return store.ErrNotFound
	case sqlite3.SQLITE_CONSTRAINT_CHECK, sqlite3.SQLITE_CONSTRAINT_NOTNULL:
		return store.ErrInvalid
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN,
		sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
		return store.ErrUnavailable
	}
	return nil
}
