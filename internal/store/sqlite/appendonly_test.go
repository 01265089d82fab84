package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// cols are the audit_log columns the raw statements of these tests set.
const cols = `(id, time, ref, subject_kind, subject_ref, environment, decision, bundle_revision, input_hash, runner, outcome, latency_micros, parent_id)`

// withStoredAudit is a store holding one audit record, "a-1", which it returns.
func withStoredAudit(t *testing.T) (rawStore, store.AuditRecord) {
	t.Helper()
	s := open(t).(rawStore)
	r := store.AuditRecord{ID: "a-1", Time: time.UnixMicro(1_700_000_000_000_000).UTC(), Ref: "x:y@1",
		Decision: "denied", Outcome: "not-run", InputHash: "h"}
	if err := s.AppendAudit(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return s, r
}

// TestAuditRefusesReplace: INSERT OR REPLACE, REPLACE INTO and UPSERT deleted-and-rewrote an
// audit row without firing the DELETE trigger; the BEFORE INSERT trigger of 0006 refuses every
// insert naming a stored id, through a raw connection as through the store.
func TestAuditRefusesReplace(t *testing.T) {
	ctx := context.Background()
	s, orig := withStoredAudit(t)
	for _, tc := range []struct {
		name, q string
	}{
		{"insert or replace", `INSERT OR REPLACE INTO audit_log ` + cols + ` VALUES ('a-1', 1, 'x:y@1', '', '', '', 'allowed', '', 'forged', '', 'ok', 0, '')`},
		{"replace into", `REPLACE INTO audit_log ` + cols + ` VALUES ('a-1', 1, 'x:y@1', '', '', '', 'allowed', '', 'forged', '', 'ok', 0, '')`},
		{"upsert", `INSERT INTO audit_log ` + cols + ` VALUES ('a-1', 1, 'x:y@1', '', '', '', 'allowed', '', 'forged', '', 'ok', 0, '')
			ON CONFLICT (id) DO UPDATE SET decision = excluded.decision, input_hash = excluded.input_hash`},
		{"insert or ignore", `INSERT OR IGNORE INTO audit_log ` + cols + ` VALUES ('a-1', 1, 'x:y@1', '', '', '', 'allowed', '', 'forged', '', 'ok', 0, '')`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.ExecRaw(ctx, tc.q); err == nil {
				t.Fatalf("%s succeeded on the append-only audit log", tc.name)
			}
			got, err := s.GetAudit(ctx, "a-1")
			if err != nil {
				t.Fatal(err)
			}
			if got.Decision != orig.Decision || got.InputHash != orig.InputHash || !got.Time.Equal(orig.Time) {
				t.Fatalf("record changed: %+v", got)
			}
		})
	}
	// The trigger refuses only stored ids: the same statement with a new id is an insert.
	if err := s.ExecRaw(ctx, `INSERT OR REPLACE INTO audit_log `+cols+` VALUES ('a-2', 1, 'x:y@1', '', '', '', 'allowed', '', 'h', '', 'ok', 0, '')`); err != nil {
		t.Fatalf("a new id: %v", err)
	}
	// A duplicate through the store is still the typed conflict.
	if err := s.AppendAudit(ctx, orig); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate AppendAudit = %v, want ErrConflict", err)
	}
}

// TestAuditRefusalStopsWithoutStatementRollback: migration 0011 has the append-only INSERT
// trigger stop its statement with FAIL, so the store's INSERT OR FAIL of a batch keeps no
// statement journal: in a transaction, the rows before a stored id stay until the
// transaction is rolled back (as the store does on any error), and the stored row is
// unchanged.
func TestAuditRefusalStopsWithoutStatementRollback(t *testing.T) {
	ctx := context.Background()
	s, stored := withStoredAudit(t)
	tx, err := s.raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }() // for a Fatal before the test's own rollback
	const insert = `INSERT OR FAIL INTO audit_log ` + cols + ` VALUES
		('a-0', 1, 'x:y@1', '', '', '', 'allowed', '', 'h', '', 'ok', 0, ''),
		('a-1', 1, 'x:y@1', '', '', '', 'allowed', '', 'forged', '', 'ok', 0, '')`
	if _, err := tx.ExecContext(ctx, insert); err == nil {
		t.Fatal("an insert naming a stored id succeeded")
	} else if classify(err) != store.ErrConflict {
		t.Fatalf("refusal %v, want the trigger's conflict", err)
	}
	var kept int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM audit_log WHERE id = 'a-0'`).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if kept != 1 {
		t.Fatalf("%d rows before the refused one left in the transaction, want 1: the statement was rolled back (ABORT), which needs a statement journal", kept)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetAudit(ctx, "a-0"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetAudit of the rolled-back row = %v, want ErrNotFound", err)
	}
	if got, err := s.GetAudit(ctx, "a-1"); err != nil || got.InputHash != stored.InputHash || got.Decision != stored.Decision {
		t.Fatalf("stored record after the refusal: %+v, %v", got, err)
	}
}
