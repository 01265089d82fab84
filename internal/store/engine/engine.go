// Package engine picks the store engine a DSN names: "" is SQLite at <dataDir>/xema.db
// (the embedded default), "sqlite:PATH" is SQLite at PATH, "postgres://..." and
// "postgresql://..." are PostgreSQL.
package engine

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/postgres"
	"github.com/xemahq/xema/internal/store/sqlite"
)

// DefaultFile is the SQLite file under the data directory when no DSN is given.
const DefaultFile = "xema.db"

// target is what a DSN resolves to: a SQLite path or a PostgreSQL DSN.
type target struct {
	sqlitePath  string
	postgresDSN string
}

func resolve(dsn, dataDir string) (target, error) {
	switch {
	case dsn == "":
		if dataDir == "" {
			return target{}, fmt.Errorf("%w: store: no DSN and no data directory for the default SQLite file", store.ErrInvalid)
		}
		return target{sqlitePath: filepath.Join(dataDir, DefaultFile)}, nil
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(dsn, "sqlite:")
		if path == "" {
			return target{}, fmt.Errorf("%w: store DSN %q names no file: want sqlite:PATH", store.ErrInvalid, dsn)
		}
		return target{sqlitePath: path}, nil
	case IsPostgres(dsn):
		return target{postgresDSN: dsn}, nil
	}
	return target{}, fmt.Errorf(`%w: store DSN %q: want "" (SQLite under the data directory), "sqlite:PATH", or "postgres://..."`,
		store.ErrInvalid, redact(dsn))
}

// redact hides a password the DSN may carry, so that it can be named in an error.
func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		return u.Redacted()
	}
	if i := strings.Index(dsn, "@"); i >= 0 {
		return "xxxxx" + dsn[i:]
	}
	return dsn
}

// Open opens the store dsn names and applies pending migrations.
func Open(ctx context.Context, dsn, dataDir string) (store.Store, error) {
	t, err := resolve(dsn, dataDir)
	if err != nil {
		return nil, err
	}
	if t.postgresDSN != "" {
		return postgres.Open(ctx, t.postgresDSN)
	}
	return sqlite.Open(ctx, t.sqlitePath)
}

// Migrate applies pending migrations to the store dsn names and returns their versions.
func Migrate(ctx context.Context, dsn, dataDir string) ([]string, error) {
	t, err := resolve(dsn, dataDir)
	if err != nil {
		return nil, err
	}
	if t.postgresDSN != "" {
		return postgres.Migrate(ctx, t.postgresDSN)
	}
	return sqlite.Migrate(ctx, t.sqlitePath)
}

// Describe names the store dsn resolves to, without secrets, for logs and messages.
func Describe(dsn, dataDir string) string {
	t, err := resolve(dsn, dataDir)
	switch {
	case err != nil:
		return "invalid store " + redact(dsn)
	case t.postgresDSN != "":
		return "postgres " + redact(t.postgresDSN)
	}
	return "sqlite " + t.sqlitePath
}

// IsPostgres reports whether dsn names a PostgreSQL store.
func IsPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// ErrNotSQLite: the DSN names PostgreSQL, which is backed up with its own tools.
var ErrNotSQLite = errors.New("not the embedded SQLite store")

// SQLitePath is the SQLite file dsn names (under dataDir when dsn is ""); ErrNotSQLite for
// PostgreSQL.
func SQLitePath(dsn, dataDir string) (string, error) {
	t, err := resolve(dsn, dataDir)
	if err != nil {
		return "", err
	}
	if t.postgresDSN != "" {
		return "", ErrNotSQLite
	}
	return t.sqlitePath, nil
}

// Backup copies the SQLite store at path to dest consistently, while it serves.
func Backup(ctx context.Context, path, dest string) error { return sqlite.Backup(ctx, path, dest) }

// Restore copies the backup from to path, a store that must not exist yet.
func Restore(ctx context.Context, from, path string) error { return sqlite.Restore(ctx, from, path) }
