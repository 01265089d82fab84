package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/store"

	"github.com/xemahq/xema/migrations"
)

// Migration is one SQL file of migrations/<engine>/.
type Migration struct {
	Version string // the file name without .sql, e.g. "0001_init"
	SQL     string
}

// Migrations returns the migrations of engine in the order they apply.
func Migrations(engine string) ([]Migration, error) {
	names, err := fs.Glob(migrations.FS, engine+"/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list %s migrations: %w", engine, err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no migrations for engine %q", engine)
	}
	sort.Strings(names)
	out := make([]Migration, 0, len(names))
	for _, name := range names {
		b, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: strings.TrimSuffix(path.Base(name), ".sql"), SQL: string(b)})
	}
	return out, nil
}

// Migrate applies the migrations of d.Name that db has not recorded in schema_migrations,
// each in its own transaction with its record, and returns the versions it applied.
func Migrate(ctx context.Context, db *sql.DB, d Dialect) ([]string, error) {
	s := &Store{db: db, d: d}
	ms, err := Migrations(d.Name)
	if err != nil {
		return nil, err
	}
	lock := func(tx *sql.Tx, op string) error {
		if d.MigrationLock == "" {
			return nil
		}
		if _, err := tx.ExecContext(ctx, d.MigrationLock); err != nil {
			return s.fail(op+": take migration lock", err)
		}
		return nil
	}
	op := "create schema_migrations"
	if err := s.inTx(ctx, op, func(tx *sql.Tx) error {
		if err := lock(tx, op); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version TEXT PRIMARY KEY, applied_at TEXT NOT NULL)`); err != nil {
			return s.fail(op, err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var applied []string
	for _, m := range ms {
		op := "apply migration " + d.Name + "/" + m.Version
		ran := false
		err := s.inTx(ctx, op, func(tx *sql.Tx) error {
			if err := lock(tx, op); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRowContext(ctx, d.bind(`SELECT count(*) FROM schema_migrations WHERE version = ?`), m.Version).Scan(&n); err != nil {
				return s.fail(op, err)
			}
			if n > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return s.fail(op, err)
			}
			if _, err := tx.ExecContext(ctx, d.bind(`INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`),
				m.Version, store.Stamp(time.Time{}).Format(time.RFC3339Nano)); err != nil {
				return s.fail(op, err)
			}
			ran = true
			return nil
		})
		if err != nil {
			return applied, err
		}
		if ran {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}
