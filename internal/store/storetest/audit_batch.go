package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// auditBatch is n full records with ids prefix-0 ... prefix-(n-1).
func auditBatch(prefix string, n int) []store.AuditRecord {
	rs := make([]store.AuditRecord, n)
	for i := range rs {
		rs[i] = AuditRecord(fmt.Sprintf("%s-%d", prefix, i))
		rs[i].LatencyMicros = int64(i)
	}
	return rs
}

// wantAudits asserts every record of rs is stored as given.
func wantAudits(t *testing.T, s store.Store, rs []store.AuditRecord) {
	t.Helper()
	for _, r := range rs {
		got, err := s.GetAudit(context.Background(), r.ID)
		if err != nil {
			t.Fatalf("GetAudit(%s): %v", r.ID, err)
		}
		equal(t, "audit record "+r.ID, got, r)
	}
}

// wantNoAudits asserts no record of rs is stored.
func wantNoAudits(t *testing.T, s store.Store, rs []store.AuditRecord) {
	t.Helper()
	for _, r := range rs {
		if _, err := s.GetAudit(context.Background(), r.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("GetAudit(%s) after a refused batch = %v, want ErrNotFound", r.ID, err)
		}
	}
}

func testAuditBatch(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.AppendAudits(ctx, nil); err != nil {
		t.Fatalf("AppendAudits(nil) = %v, want nil", err)
	}

	mixed := []store.AuditRecord{AuditRecord("b-full"), {ID: "b-bare", Time: t0, Decision: "allowed"}}
	if err := s.AppendAudits(ctx, mixed); err != nil {
		t.Fatalf("AppendAudits: %v", err)
	}
	wantAudits(t, s, mixed)

	// More rows than one INSERT statement carries: the batch spans statements, one transaction.
	large := auditBatch("b-large", 150)
	if err := s.AppendAudits(ctx, large); err != nil {
		t.Fatalf("AppendAudits(150): %v", err)
	}
	wantAudits(t, s, large)

	before := time.Now().Add(-time.Second)
	if err := s.AppendAudits(ctx, []store.AuditRecord{{ID: "b-stamped", Decision: "error"}}); err != nil {
		t.Fatalf("AppendAudits without time: %v", err)
	}
	got, err := s.GetAudit(ctx, "b-stamped")
	if err != nil {
		t.Fatalf("GetAudit: %v", err)
	}
	if got.Time.Before(before) || got.Time.After(time.Now().Add(time.Second)) {
		t.Fatalf("record without time stored at %v, want now", got.Time)
	}

	// All or nothing: one bad record anywhere refuses the whole batch, typed.
	for _, tc := range []struct {
		name  string
		batch func() []store.AuditRecord
		want  error
	}{
		{"stored id last", func() []store.AuditRecord {
			return append(auditBatch("b-stored", 3), AuditRecord("b-full"))
		}, store.ErrConflict},
		{"stored id in the second statement", func() []store.AuditRecord {
			rs := auditBatch("b-second", 150)
			rs[120] = AuditRecord("b-large-7")
			return rs
		}, store.ErrConflict},
		{"same id twice", func() []store.AuditRecord {
			rs := auditBatch("b-twice", 3)
			return append(rs, rs[0])
		}, store.ErrConflict},
		{"no decision", func() []store.AuditRecord {
			rs := auditBatch("b-nodecision", 3)
			rs[2].Decision = ""
			return rs
		}, store.ErrInvalid},
		{"detail not JSON", func() []store.AuditRecord {
			rs := auditBatch("b-notjson", 3)
			rs[1].Detail = []byte("{")
			return rs
		}, store.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			batch := tc.batch()
			wantErr(t, "AppendAudits", s.AppendAudits(ctx, batch), tc.want)
			var fresh []store.AuditRecord
			for _, r := range batch {
				if r.ID != "b-full" && r.ID != "b-large-7" {
					fresh = append(fresh, r)
				}
			}
			wantNoAudits(t, s, fresh)
		})
	}
	wantAudits(t, s, mixed)

	// Batches from concurrent writers all land (SQLite queues them on its write lock).
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() { errs <- s.AppendAudits(ctx, auditBatch(fmt.Sprintf("b-w%d", w), 10)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent AppendAudits: %v", err)
		}
	}
	for w := range 8 {
		wantAudits(t, s, auditBatch(fmt.Sprintf("b-w%d", w), 10))
	}
}
