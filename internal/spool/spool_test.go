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
	st, err := sqlite.Open(ctx, dir+"/x.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
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
	st, err := sqlite.Open(ctx, dir+"/x.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
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
