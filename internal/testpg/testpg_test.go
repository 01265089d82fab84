package testpg

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

// TestNewDatabase shows the server answers and each test gets its own, empty database.
func TestNewDatabase(t *testing.T) {
	ctx := context.Background()
	a, b := NewDatabase(t), NewDatabase(t)
	if a == b {
		t.Fatalf("two databases share the URL %s", a)
	}
	conn, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE t (x int)"); err != nil {
		t.Fatalf("create table: %v", err)
	}
	other, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer other.Close(ctx)
	var n int
	if err := other.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 't'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("a table of one database is visible in the other")
	}
}

func TestFindBinaries(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // nothing on PATH: the versioned directories decide
	root := t.TempDir()
	if _, err := findBinaries(root); err == nil || !strings.Contains(err.Error(), "initdb") {
		t.Fatalf("findBinaries with none installed = %v, want an error naming initdb", err)
	}
	for _, v := range []string{"9", "15", "16"} {
		bin := filepath.Join(root, v, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		progs := []string{"initdb", "pg_ctl"}
		if v == "16" {
			progs = progs[:1] // incomplete: must be passed over
		}
		for _, p := range progs {
			if err := os.WriteFile(filepath.Join(bin, p), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := findBinaries(root)
	if want := filepath.Join(root, "15", "bin"); err != nil || got != want {
		t.Fatalf("findBinaries = %q, %v; want the newest complete %q", got, err, want)
	}
}
