package spool

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/sqlite"
)

func TestSpoolSurvivesReopenAndDrains(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := storeIn(t, dir)
	s, err := Open(dir, st)
	if err != nil {
		t.Fatal(err)
	}
	rec := store.AuditRecord{ID: "inv_1.outcome", Org: "acme", Time: time.Now(), Ref: "kb:page.read@1", Decision: "allowed",
		Reasons: json.RawMessage("[]"), Outcome: "ok", ParentID: "inv_1", Detail: json.RawMessage(`{}`)}
	if !s.Add(Entry{Audit: &rec}) {
		t.Fatal("entry not durable")
	}
	if !s.Add(Entry{Idempotency: &store.IdempotencyCompletion{Org: "acme", Subject: "agent:x", Key: "k", Status: 200, Body: json.RawMessage(`{}`)}}) {
		t.Fatal("entry not durable")
	}
	_ = s.f.Close() // a crash: nothing drained
	s, err = Open(dir, st)
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 2 {
		t.Fatalf("reopened spool holds %d entries, want 2", s.Len())
	}
	if err := s.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 0 {
		t.Fatalf("%d entries left", s.Len())
	}
	if _, err := st.GetAudit(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, st) // cleared: nothing replayed
	if err != nil || s.Len() != 0 {
		t.Fatalf("after drain the file holds %d entries (%v)", s.Len(), err)
	}
}

// A kill mid-write leaves a torn last entry; an entry added after the restart must not be
// appended to it (and so be lost with it at the next start).
func TestEntryAfterTornTailSurvives(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := store.IdempotencyCompletion{Org: "acme", Subject: "agent:x", Key: "k1", Status: 200, Body: json.RawMessage(`{}`)}
	if !s.Add(Entry{Idempotency: &c}) {
		t.Fatal("entry not durable")
	}
	if _, err := s.f.WriteAt([]byte(`{"idempotency":{"Org":"ac`), s.off); err != nil { // torn: no newline
		t.Fatal(err)
	}
	_ = s.f.Close()
	if s, err = Open(dir, nil); err != nil || s.Len() != 1 {
		t.Fatalf("reopened: %d entries, %v; want the whole one", s.Len(), err)
	}
	c.Key = "k2"
	if !s.Add(Entry{Idempotency: &c}) {
		t.Fatal("entry not durable")
	}
	_ = s.f.Close()
	if s, err = Open(dir, nil); err != nil || s.Len() != 2 {
		t.Fatalf("second reopen: %d entries, %v; want 2 (the one added after the torn entry kept)", s.Len(), err)
	}
	_ = s.f.Close()
}

// Entries carry call outputs: the file is owner-only even when it was created wider.
func TestSpoolFileIsOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.f.Close()
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("spool file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
}

// An entry the store refuses for good (here: a key it does not know) is dropped so the
// spool drains, but the drop is logged, without the entry's answer body.
func TestDroppedEntryIsLogged(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := storeIn(t, dir)
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(prev)
	s, err := Open(dir, st)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	s.Add(Entry{Idempotency: &store.IdempotencyCompletion{Org: "acme", Subject: "agent:x", Key: "gone", Status: 200,
		Body: json.RawMessage(`{"output":{"token":"s3cret"}}`)}})
	if err := s.Drain(ctx); err != nil || s.Len() != 0 {
		t.Fatalf("drain: %v, %d left", err, s.Len())
	}
	if out := logs.String(); !strings.Contains(out, "dropping it") || !strings.Contains(out, "idempotency key gone") || strings.Contains(out, "s3cret") {
		t.Fatalf("logs:\n%s\nwant the drop named, without the body", out)
	}
}

// A key's outcome spooled while the store was down reaches it whole: its result byte for
// byte beside its answer as sent. An entry the previous release spooled (no result; the file
// outlives an upgrade) still drains, as a key without a result, which replays its answer as
// sent.
func TestIdempotencyResultDrains(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := storeIn(t, dir)
	now := time.Now().UTC()
	claim := func(key string) store.IdempotencyRecord {
		return store.IdempotencyRecord{Org: "acme", Subject: "agent:x", Key: key, InputHash: "h", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	}
	for _, key := range []string{"new", "old"} {
		if _, claimed, err := st.ClaimIdempotency(ctx, claim(key)); err != nil || !claimed {
			t.Fatal(claimed, err)
		}
	}
	s, err := Open(dir, st)
	if err != nil {
		t.Fatal(err)
	}
	result := json.RawMessage(`{"kind":"held","held":{"code":"PENDING_APPROVAL","message":"m","auditId":"inv_1","status":"pending-approval","approvalId":"apr_1"}}`)
	if !s.Add(Entry{Idempotency: &store.IdempotencyCompletion{Org: "acme", Subject: "agent:x", Key: "new", Result: result,
		Status: 202, Body: json.RawMessage(`{"code":"PENDING_APPROVAL"}`), AuditID: "inv_1"}}) {
		t.Fatal("entry not durable")
	}
	previous := `{"idempotency":{"Org":"acme","Subject":"agent:x","Key":"old","Status":403,"Body":{"code":"DENIED"},"AuditID":"deny_1"}}` + "\n"
	if _, err := s.f.WriteAt([]byte(previous), s.off); err != nil {
		t.Fatal(err)
	}
	_ = s.f.Close()
	if s, err = Open(dir, st); err != nil || s.Len() != 2 {
		t.Fatalf("reopened: %d entries, %v; want 2", s.Len(), err)
	}
	defer s.Close(ctx)
	if err := s.Drain(ctx); err != nil || s.Len() != 0 {
		t.Fatalf("drain: %v, %d left", err, s.Len())
	}
	got, _, err := st.ClaimIdempotency(ctx, claim("new"))
	if err != nil || got.State != store.IdempotencyDone || !bytes.Equal(got.Result, result) || got.Status != 202 || got.AuditID != "inv_1" {
		t.Fatalf("spooled key = %s %s %d %s, %v; want its result byte for byte", got.State, got.Result, got.Status, got.AuditID, err)
	}
	got, _, err = st.ClaimIdempotency(ctx, claim("old"))
	if err != nil || got.State != store.IdempotencyDone || got.Result != nil || got.Status != 403 || string(got.Body) != `{"code":"DENIED"}` {
		t.Fatalf("key the previous release spooled = %s %s %d %s, %v; want its answer as sent, no result", got.State, got.Result, got.Status, got.Body, err)
	}
}

// storeIn is a SQLite store in dir, closed when the test ends.
func storeIn(t *testing.T, dir string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), dir+"/x.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}
