package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/audit/prunebench"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/storetest"
)

// rawStore adds the suite's raw-SQL hook, through a connection of its own to the same file.
type rawStore struct {
	*Store
	raw *sql.DB
}

func (s rawStore) ExecRaw(ctx context.Context, q string) error {
	_, err := s.raw.ExecContext(ctx, q)
	return err
}

func open(t testing.TB) store.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "xema.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	raw, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		t.Fatalf("open raw connection: %v", err)
	}
	t.Cleanup(func() {
		raw.Close()
		s.Close()
	})
	return rawStore{Store: s, raw: raw}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

func BenchmarkStore(b *testing.B) { storetest.Bench(b, open) }

func TestAuditRollupsAcrossRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xema.db")
	storetest.AuditRollupsAcrossRestart(t, func() store.Store {
		s, err := Open(context.Background(), path)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "nested", "data")
	path := filepath.Join(dir, "xema.db")

	applied, err := Migrate(ctx, path)
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if len(applied) == 0 || applied[0] != "0001_init" {
		t.Fatalf("first Migrate applied %v, want 0001_init first", applied)
	}
	again, err := Migrate(ctx, path)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Migrate applied %v, %v; want nothing", again, err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", p, fi.Mode().Perm(), want)
		}
	}

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open after Migrate: %v", err)
	}
	defer s.Close()
	// The store's connections are opened with DSN(path); one more shows what they get.
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mode string
	var fk int
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || fk != 1 {
		t.Fatalf("journal_mode %q, foreign_keys %d; want wal, 1", mode, fk)
	}
}

func TestOpenRefusesBadPath(t *testing.T) {
	for _, path := range []string{"", "x.db?mode=memory", "x#y"} {
		if _, err := Open(context.Background(), path); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Open(%q) = %v, want ErrInvalid", path, err)
		}
	}
}

// TestConnectionPragmas: every connection keeps temporary files in memory (a spilled
// statement journal cost a file's writes in every batch) and returns from a commit once it
// is fsynced (synchronous FULL, whatever the driver's default: an audit record is durable
// when its Append returns).
func TestConnectionPragmas(t *testing.T) {
	s := open(t).(rawStore)
	for _, tc := range []struct {
		pragma string
		want   int
	}{{"temp_store", 2 /* MEMORY */}, {"synchronous", 2 /* FULL */}} {
		var got int
		if err := s.raw.QueryRow(`PRAGMA ` + tc.pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("PRAGMA %s = %d, want %d", tc.pragma, got, tc.want)
		}
	}
}

// TestPageSize: a new database gets the store's page size; one created with another keeps
// it (a page size cannot change in WAL mode) and works as before.
func TestPageSize(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		existing int // page size of a database made before Open; 0: none
		want     int
	}{{"new file", 0, pageSize}, {"existing 4096", 4096, 4096}, {"existing 8192", 8192, 8192}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "xema.db")
			if tc.existing != 0 {
				db, err := sql.Open("sqlite", "file:"+path+fmt.Sprintf("?_pragma=page_size(%d)&_journal_mode=WAL", tc.existing))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := db.Exec(`CREATE TABLE before_xema (x INTEGER)`); err != nil {
					t.Fatal(err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
			s, err := Open(ctx, path)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s.Close()
			r := store.AuditRecord{ID: "a-1", Ref: "x:y@1", Decision: "allowed", PolicyInput: []byte(`{"pad":"` + strings.Repeat("x", 3*pageSize) + `"}`)}
			if err := s.AppendAudit(ctx, r); err != nil {
				t.Fatal(err)
			}
			if got, err := s.GetAudit(ctx, "a-1"); err != nil || string(got.PolicyInput) != string(r.PolicyInput) {
				t.Fatalf("GetAudit: %v, policy input of %d bytes, want %d", err, len(got.PolicyInput), len(r.PolicyInput))
			}
			raw, err := sql.Open("sqlite", DSN(path))
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			var got int
			if err := raw.QueryRow(`PRAGMA page_size`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("page size %d, want %d", got, tc.want)
			}
		})
	}
}

// BenchmarkAppendDuringPrune: go test -run '^$' -bench AppendDuringPrune -benchtime 1x
// (XEMA_PRUNE_BENCH_RECORDS sets the log's size, default 1,000,000).
func BenchmarkAppendDuringPrune(b *testing.B) {
	prunebench.BenchAppendDuringPrune(b, open(b), prunebench.PruneBenchRecords(), 16)
}

// BenchmarkAuditStats: go test -run '^$' -bench AuditStats -benchtime 1x
// (XEMA_STATS_BENCH_RECORDS sets the log's size, default 200,000).
func BenchmarkAuditStats(b *testing.B) {
	storetest.BenchAuditStats(b, open(b), storetest.StatsBenchRecords())
}
