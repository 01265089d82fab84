package spool

import (
	"context"
	"encoding/json"
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
