package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/postgres"
	"github.com/xemahq/xema/internal/store/sqlite"
	"github.com/xemahq/xema/internal/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

func TestOpenPicksEngine(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	explicit := filepath.Join(t.TempDir(), "other.db")
	pg := testpg.NewDatabase(t)
	pgAlias := "postgresql://" + strings.TrimPrefix(pg, "postgres://")

	for _, tc := range []struct {
		name, dsn string
		check     func(t *testing.T, s store.Store)
	}{
		{"default sqlite under the data dir", "", func(t *testing.T, s store.Store) {
			if _, ok := s.(*sqlite.Store); !ok {
				t.Fatalf("got %T, want *sqlite.Store", s)
			}
			if _, err := os.Stat(filepath.Join(dataDir, DefaultFile)); err != nil {
				t.Fatalf("default file: %v", err)
			}
		}},
		{"sqlite:PATH", "sqlite:" + explicit, func(t *testing.T, s store.Store) {
			if _, err := os.Stat(explicit); err != nil {
				t.Fatalf("sqlite file: %v", err)
			}
		}},
		{"postgres://", pg, func(t *testing.T, s store.Store) {
			if _, ok := s.(*postgres.Store); !ok {
				t.Fatalf("got %T, want *postgres.Store", s)
			}
		}},
		{"postgresql://", pgAlias, func(t *testing.T, s store.Store) {
			if _, ok := s.(*postgres.Store); !ok {
				t.Fatalf("got %T, want *postgres.Store", s)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(ctx, tc.dsn, dataDir)
			if err != nil {
				t.Fatalf("Open(%q): %v", tc.dsn, err)
			}
			defer s.Close()
			if err := s.Ping(ctx); err != nil {
				t.Fatalf("Ping: %v", err)
			}
			tc.check(t, s)
		})
	}
}

func TestOpenRefusesUnknownDSN(t *testing.T) {
	for _, tc := range []struct{ dsn, named, hidden string }{
		{"mysql://root:hunter2@db/x", "mysql://root:xxxxx@db/x", "hunter2"},
		{"root:hunter2@tcp(db)/x", "xxxxx@tcp(db)/x", "hunter2"},
		{"./xema.db", "./xema.db", ""},
		{"sqlite:", "sqlite:", ""},
	} {
		t.Run(tc.dsn, func(t *testing.T) {
			_, err := Open(context.Background(), tc.dsn, t.TempDir())
			if !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("Open(%q) = %v, want ErrInvalid", tc.dsn, err)
			}
			if !strings.Contains(err.Error(), tc.named) {
				t.Errorf("error %q does not name %q", err, tc.named)
			}
			if tc.hidden != "" && strings.Contains(err.Error(), tc.hidden) {
				t.Errorf("error %q repeats the password", err)
			}
		})
	}
	if _, err := Open(context.Background(), "", ""); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Open with no DSN and no data dir = %v, want ErrInvalid", err)
	}
}

func TestMigrate(t *testing.T) {
	ctx := context.Background()
	for _, dsn := range []string{"", testpg.NewDatabase(t)} {
		t.Run(Describe(dsn, "DIR"), func(t *testing.T) {
			dir := t.TempDir()
			applied, err := Migrate(ctx, dsn, dir)
			if err != nil || len(applied) == 0 {
				t.Fatalf("Migrate = %v, %v; want the migrations applied", applied, err)
			}
			again, err := Migrate(ctx, dsn, dir)
			if err != nil || len(again) != 0 {
				t.Fatalf("second Migrate = %v, %v; want nothing", again, err)
			}
		})
	}
}
