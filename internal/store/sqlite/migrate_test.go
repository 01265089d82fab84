package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/sqlstore"
)

// TestAuditRebuildKeepsRecordsAndGuards: migration 0010 rebuilds audit_log (to drop its
// json_valid CHECKs); a log written before it keeps every row, column for column, the
// table keeps its indexes and append-only triggers, and the store still refuses a record
// whose JSON is invalid.
func TestAuditRebuildKeepsRecordsAndGuards(t *testing.T) {
	const rebuild = "0010_audit_unchecked_json"
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "xema.db")
	db := logBefore(t, path, rebuild, 0)
	rowsBefore, guardsBefore := auditRows(t, db), auditGuards(t, db)

	applied, err := Migrate(ctx, path)
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if len(applied) == 0 || applied[0] != rebuild {
		t.Fatalf("Migrate applied %v, want %s first", applied, rebuild)
	}
	if got := auditRows(t, db); !reflect.DeepEqual(got, rowsBefore) {
		t.Fatalf("rows after the rebuild:\n%v\nbefore:\n%v", got, rowsBefore)
	}
	// The later 0011 changes only how the refusal of a stored id stops its statement.
	for i, g := range guardsBefore {
		guardsBefore[i] = strings.Replace(g, "RAISE(ABORT, 'audit_log is append-only: the id exists')",
			"RAISE(FAIL, 'audit_log is append-only: the id exists')", 1)
	}
	// 0016 replaces the delete guard (deletes beneath a prune checkpoint pass: storetest's AuditPrune).
	keep := func(gs []string) []string {
		return slices.DeleteFunc(gs, func(g string) bool { return strings.HasPrefix(g, "trigger audit_log_no_delete") })
	}
	guardsBefore = keep(guardsBefore)
	// Every index and trigger is kept (later migrations may add indexes).
	if got := keep(auditGuards(t, db)); slices.ContainsFunc(guardsBefore, func(w string) bool { return !slices.Contains(got, w) }) {
		t.Fatalf("indexes and triggers after the rebuild %v, before %v", got, guardsBefore)
	}
	for _, q := range []string{
		`UPDATE audit_log SET decision = 'allowed' WHERE id = 'inv_3'`,
		`DELETE FROM audit_log WHERE id = 'inv_1'`,
		`INSERT OR REPLACE INTO audit_log (id, time, ref, subject_kind, subject_ref, environment, decision, bundle_revision,
			input_hash, runner, outcome, latency_micros, parent_id) VALUES ('inv_3', 1, 'x', '', '', '', 'allowed', '', 'forged', '', 'ok', 0, '')`,
	} {
		if _, err := db.ExecContext(ctx, q); err == nil {
			t.Errorf("after the rebuild, %s succeeded on the append-only log", q)
		}
	}
	if got := auditRows(t, db); !reflect.DeepEqual(got, rowsBefore) {
		t.Fatalf("rows changed by refused statements:\n%v", got)
	}

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bad := store.AuditRecord{ID: "inv_4", Ref: "kb:page.read@1", Decision: "allowed", Reasons: []byte(`[{"code":`)}
	if err := s.AppendAudit(ctx, bad); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("AppendAudit of invalid JSON = %v, want ErrInvalid", err)
	}
	if err := s.AppendAudits(ctx, []store.AuditRecord{bad}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("AppendAudits of invalid JSON = %v, want ErrInvalid", err)
	}
	if _, err := s.GetAudit(ctx, "inv_4"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetAudit of the refused record = %v, want ErrNotFound", err)
	}
}

// logBefore makes a SQLite database at path migrated up to (not including) version, holding
// three audit records of every column's kinds and n more decision records, and returns a
// connection to it.
func logBefore(t *testing.T, path, version string, n int) *sql.DB {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	ms, err := sqlstore.Migrations("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	exec(`CREATE TABLE schema_migrations (version TEXT PRIMARY KEY, applied_at TEXT NOT NULL)`)
	for _, m := range ms {
		if m.Version >= version {
			break
		}
		exec(m.SQL)
		exec(`INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, m.Version, time.Now().UTC().Format(time.RFC3339Nano))
	}
	const insert = `INSERT INTO audit_log (id, time, ref, subject_kind, subject_ref, environment, decision, reasons,
		suggestions, obligations, bundle_revision, input_hash, runner, outcome, latency_micros, parent_id, detail, org,
		policy_input, chain_id, chain_seq, chain_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	exec(insert, "inv_1", 1_700_000_000_000_001, "kb:page.read@1", "agent", "agent:bot", "project", "allowed",
		`[]`, `[]`, `[{"kind":"quota"}]`, "r4", "hmac-sha256:aa", "http", "admitted", 0, "", nil, "acme",
		`{"ref":"kb:page.read@1"}`, "c1", 1, "h1")
	exec(insert, "inv_2", 1_700_000_000_000_002, "kb:page.read@1", "agent", "agent:bot", "project", "allowed",
		nil, nil, nil, "r4", "hmac-sha256:aa", "http", "ok", 812, "inv_1", `{"status":200}`, "acme", nil, "c1", 2, "h2")
	exec(insert, "inv_3", 1_700_000_000_000_003, "scm:pr.create@1", "user", "user:ann", "prod", "denied",
		`[{"code":"no-grant"}]`, `[]`, nil, "r5", "hmac-sha256:bb", "", "not-run", 0, "", nil, "", nil, "", 0, "")
	for i := range n {
		exec(insert, fmt.Sprintf("inv_bulk_%06d", i), 1_700_000_001_000_000+i, "kb:page.read@1", "agent",
			fmt.Sprintf("agent:bot%d", i%20), "project", "allowed", `[]`, `[]`, `[{"kind":"quota","requests":1000,"per":"24h"}]`,
			"r4", "hmac-sha256:"+strings.Repeat("c", 64), "http", "admitted", 0, "", nil, "acme",
			`{"ref":"kb:page.read@1","subject":{"kind":"agent","ref":"agent:bot"},"environment":"project"}`, "c2", i+1, strings.Repeat("d", 64))
	}
	return db
}

// auditRows is every column of every audit row, in id order.
func auditRows(t *testing.T, db *sql.DB) [][]any {
	t.Helper()
	rows, err := db.Query(`SELECT * FROM audit_log ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]any
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]any{cols}, vals...))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// auditGuards is each of audit_log's indexes and triggers, with its SQL.
func auditGuards(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query(`SELECT type || ' ' || name || ': ' || coalesce(sql, '') FROM sqlite_schema WHERE tbl_name = 'audit_log' AND type IN ('index', 'trigger') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 9 { // 6 indexes, the primary key's, 3 triggers
		t.Fatalf("audit_log has only %v", out)
	}
	return out
}

// TestAuditMigrationsCrashImage: what a crash in the middle of migration 0010 (the audit
// log rebuilt: copied, dropped, renamed) or 0011 (a trigger replaced) leaves on disk is the
// log before it. The migration runs as Migrate runs it (its SQL and its schema_migrations
// row in one transaction) on a connection whose page cache holds one page, so SQLite spills
// the transaction's uncommitted pages into the WAL; with the transaction still open, the
// database and WAL files are copied: the files a kill -9 at that line leaves. Opened, the
// copy is at the version before, every row and guard as before, and migrates cleanly.
func TestAuditMigrationsCrashImage(t *testing.T) {
	for _, version := range []string{"0010_audit_unchecked_json", "0011_audit_no_statement_journal"} {
		t.Run(version, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			path := filepath.Join(dir, "xema.db")
			db := logBefore(t, path, version, 2000)
			rowsBefore, guardsBefore := auditRows(t, db), auditGuards(t, db)
			m := migration(t, version)

			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// An empty WAL, so what the transaction spills shows as the file's growth.
			for _, q := range []string{`PRAGMA cache_size = 1`, `PRAGMA wal_checkpoint(TRUNCATE)`} {
				if _, err := conn.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			walBefore := fileSize(t, path+"-wal")
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				t.Fatalf("migration %s: %v", version, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, version, "crash"); err != nil {
				t.Fatal(err)
			}
			if grew := fileSize(t, path+"-wal") - walBefore; grew <= 0 {
				t.Fatalf("the migration spilled nothing into the WAL (%d bytes): the image would not hold a half-done migration", grew)
			}
			crashed := filepath.Join(t.TempDir(), "xema.db")
			for _, suffix := range []string{"", "-wal"} {
				copyFile(t, path+suffix, crashed+suffix)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}

			image, err := sql.Open("sqlite", DSN(crashed))
			if err != nil {
				t.Fatal(err)
			}
			defer image.Close()
			var done int
			if err := image.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version >= ?`, version).Scan(&done); err != nil {
				t.Fatal(err)
			}
			if done != 0 {
				t.Fatalf("the crash image records %d migration(s) from %s on", done, version)
			}
			if got := auditRows(t, image); !reflect.DeepEqual(got, rowsBefore) {
				t.Fatalf("the crash image holds %d audit rows, not the %d before the migration (or they differ)", len(got), len(rowsBefore))
			}
			if got := auditGuards(t, image); !slices.Equal(got, guardsBefore) {
				t.Fatalf("the crash image's indexes and triggers %v, before %v", got, guardsBefore)
			}
			if err := image.Close(); err != nil {
				t.Fatal(err)
			}
			applied, err := Migrate(ctx, crashed)
			if err != nil || len(applied) == 0 || applied[0] != version {
				t.Fatalf("Migrate of the crash image applied %v, %v; want %s first", applied, err, version)
			}
		})
	}
}

// migration is the SQLite migration of version.
func migration(t *testing.T, version string) sqlstore.Migration {
	t.Helper()
	ms, err := sqlstore.Migrations("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version == version {
			return m
		}
	}
	t.Fatalf("no SQLite migration %s", version)
	return sqlstore.Migration{}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	raw, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}
