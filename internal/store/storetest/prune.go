package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// testAuditPrune: LastLinksBefore finds each chain's boundary link; CheckpointPrune moves
// bases and the boundary forward only; DeletePrunedAudit deletes exactly the records beneath
// the checkpoints, in batches; the schema refuses a delete above a base, of any record before
// a checkpoint, and an update of a pruned-range record.
func testAuditPrune(t *testing.T, s store.Store) {
	ctx := context.Background()
	raw := s.(RawExecer)
	var rs []store.AuditRecord
	for i := range 30 {
		r := AuditRecord(fmt.Sprintf("p-a-%03d", i))
		r.Time = t0.Add(time.Duration(i) * time.Second)
		r.Chain = store.ChainLink{ChainID: "ch_a", Seq: int64(i + 1), Hash: fmt.Sprintf("ha%d", i+1)}
		rs = append(rs, r)
	}
	for i := range 10 {
		r := AuditRecord(fmt.Sprintf("p-b-%03d", i))
		r.Time = t0.Add(time.Duration(i*3) * time.Second)
		r.Chain = store.ChainLink{ChainID: "ch_b", Seq: int64(i + 1), Hash: fmt.Sprintf("hb%d", i+1)}
		rs = append(rs, r)
	}
	legacy := AuditRecord("p-legacy")
	legacy.Time = t0.Add(-time.Hour)
	rs = append(rs, legacy)
	if err := s.AppendAudits(ctx, rs); err != nil {
		t.Fatal(err)
	}
	// Nothing may be deleted before a checkpoint.
	if err := raw.ExecRaw(ctx, `DELETE FROM audit_log WHERE id = 'p-a-000'`); err == nil {
		t.Fatal("a record was deleted with no prune checkpoint")
	}
	if b, err := s.PruneBoundary(ctx); err != nil || !b.Before.IsZero() {
		t.Fatalf("PruneBoundary of a never-pruned log = %+v, %v", b, err)
	}
	before := t0.Add(10 * time.Second) // ch_a: seq 1..10; ch_b: seq 1..4 (times 0, 3, 6, 9 s)
	links, err := s.LastLinksBefore(ctx, before)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.ChainLink{{ChainID: "ch_a", Seq: 10, Hash: "ha10"}, {ChainID: "ch_b", Seq: 4, Hash: "hb4"}}
	equal(t, "LastLinksBefore", links, want)

	for _, tc := range []struct {
		name  string
		b     store.PruneBoundary
		bases []store.ChainHead
		want  error
	}{
		{"no boundary", store.PruneBoundary{}, nil, store.ErrInvalid},
		{"base without MAC", store.PruneBoundary{Before: before}, []store.ChainHead{{ChainID: "ch_a", BaseSeq: 10, BaseHash: "ha10"}}, store.ErrInvalid},
		{"unknown chain", store.PruneBoundary{Before: before}, []store.ChainHead{{ChainID: "ch_x", BaseSeq: 1, BaseHash: "h", BaseMAC: "m"}}, store.ErrNotFound},
		{"base past the head", store.PruneBoundary{Before: before}, []store.ChainHead{{ChainID: "ch_b", BaseSeq: 11, BaseHash: "h", BaseMAC: "m"}}, store.ErrConflict},
	} {
		if err := s.CheckpointPrune(ctx, tc.b, tc.bases); !errors.Is(err, tc.want) {
			t.Errorf("%s: CheckpointPrune = %v, want %v", tc.name, err, tc.want)
		}
	}
	if b, _ := s.PruneBoundary(ctx); !b.Before.IsZero() {
		t.Fatalf("a refused checkpoint moved the boundary: %+v", b)
	}
	bases := []store.ChainHead{{ChainID: "ch_a", BaseSeq: 10, BaseHash: "ha10", BaseMAC: "ma10"}, {ChainID: "ch_b", BaseSeq: 4, BaseHash: "hb4", BaseMAC: "mb4"}}
	if err := s.CheckpointPrune(ctx, store.PruneBoundary{Before: before, PrunedAt: t0.Add(time.Hour)}, bases); err != nil {
		t.Fatal(err)
	}
	if b, err := s.PruneBoundary(ctx); err != nil || !b.Before.Equal(before) || !b.PrunedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("PruneBoundary = %+v, %v", b, err)
	}
	heads, err := s.ChainHeads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range heads {
		if h.BaseSeq != bases[i].BaseSeq || h.BaseHash != bases[i].BaseHash || h.BaseMAC != bases[i].BaseMAC || h.Seq == 0 {
			t.Fatalf("head %d = %+v, want the base of %+v", i, h, bases[i])
		}
	}
	// The schema: above a base, no delete; beneath it, no update.
	for _, q := range []string{
		`DELETE FROM audit_log WHERE id = 'p-a-010'`,
		`DELETE FROM audit_log WHERE id = 'p-b-004'`,
		`UPDATE audit_log SET decision = 'allowed' WHERE id = 'p-a-000'`,
	} {
		if err := raw.ExecRaw(ctx, q); err == nil {
			t.Errorf("%s succeeded", q)
		}
	}
	if err := s.CheckpointPrune(ctx, store.PruneBoundary{Before: before.Add(-time.Second)}, nil); !errors.Is(err, store.ErrConflict) {
		t.Errorf("an earlier boundary = %v, want ErrConflict", err)
	}
	if err := s.CheckpointPrune(ctx, store.PruneBoundary{Before: before}, []store.ChainHead{{ChainID: "ch_a", BaseSeq: 5, BaseHash: "ha5", BaseMAC: "m"}}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a base moved back = %v, want ErrConflict", err)
	}
	if _, err := s.DeletePrunedAudit(ctx, 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("DeletePrunedAudit(0) = %v, want ErrInvalid", err)
	}
	var deleted []int64
	for {
		n, err := s.DeletePrunedAudit(ctx, 4)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if n > 4 {
			t.Fatalf("a batch of 4 deleted %d", n)
		}
		deleted = append(deleted, n)
	}
	var total int64
	for _, n := range deleted {
		total += n
	}
	if total != 15 { // 10 + 4 chained, 1 legacy
		t.Fatalf("deleted %d records in batches %v, want 15", total, deleted)
	}
	var left []string
	if err := s.ScanAudit(ctx, store.AuditFilter{}, func(r store.AuditRecord) error { left = append(left, r.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 26 {
		t.Fatalf("%d records left, want 26: %v", len(left), left)
	}
	for _, id := range left {
		if id == "p-a-009" || id == "p-b-003" || id == "p-legacy" {
			t.Fatalf("%s was not pruned", id)
		}
	}
	// The next append still lands and still checkpoints its head.
	r := AuditRecord("p-a-030")
	r.Chain = store.ChainLink{ChainID: "ch_a", Seq: 31, Hash: "ha31"}
	if err := s.AppendAudits(ctx, []store.AuditRecord{r}); err != nil {
		t.Fatal(err)
	}
	if heads, _ := s.ChainHeads(ctx); heads[0].Seq != 31 || heads[0].BaseSeq != 10 {
		t.Fatalf("head after append = %+v", heads[0])
	}
	var unchained int
	if err := s.ScanAudit(ctx, store.AuditFilter{Unchained: true}, func(store.AuditRecord) error { unchained++; return nil }); err != nil || unchained != 0 {
		t.Fatalf("unchained scan = %d, %v", unchained, err)
	}
}

// testDeploymentKeyReplace: ListDeploymentKeys lists what is stored; ReplaceDeploymentKey is
// a compare-and-swap that keeps retired keys in the same transaction.
func testDeploymentKeyReplace(t *testing.T, s store.Store) {
	ctx := context.Background()
	if got, err := s.ListDeploymentKeys(ctx); err != nil || len(got) != 0 {
		t.Fatalf("ListDeploymentKeys of a new store = %v, %v", got, err)
	}
	if _, err := s.DeploymentKey(ctx, "audit-chain", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeploymentKey(ctx, "search-cursor", []byte("c1")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		key       string
		old, next []byte
		keep      []store.DeploymentKeyEntry
		want      error
	}{
		{"empty next", "audit-chain", []byte("v1"), nil, nil, store.ErrInvalid},
		{"unknown name", "nope", []byte("x"), []byte("y"), nil, store.ErrNotFound},
		{"stale old", "audit-chain", []byte("v0"), []byte("v2"), nil, store.ErrConflict},
		{"kept name stored", "audit-chain", []byte("v1"), []byte("v2"), []store.DeploymentKeyEntry{{Name: "search-cursor", Secret: []byte("k")}}, store.ErrConflict},
		{"kept without secret", "audit-chain", []byte("v1"), []byte("v2"), []store.DeploymentKeyEntry{{Name: "k"}}, store.ErrInvalid},
	} {
		if err := s.ReplaceDeploymentKey(ctx, tc.key, tc.old, tc.next, t0, tc.keep...); !errors.Is(err, tc.want) {
			t.Errorf("%s: ReplaceDeploymentKey = %v, want %v", tc.name, err, tc.want)
		}
	}
	if got, _ := s.DeploymentKey(ctx, "audit-chain", []byte("other")); !bytes.Equal(got, []byte("v1")) {
		t.Fatalf("a refused replace changed the key: %q", got)
	}
	retired := store.DeploymentKeyEntry{Name: "audit-chain@1", Secret: []byte("v1-retired"), CreatedAt: t0}
	created := t0.Add(time.Hour)
	if err := s.ReplaceDeploymentKey(ctx, "audit-chain", []byte("v1"), []byte("v2"), created, retired); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListDeploymentKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The replaced key's creation time is the one given (a rewrap keeps it), not the replace's.
	if len(got) != 3 || got[0].Name != "audit-chain" || string(got[0].Secret) != "v2" || !got[0].CreatedAt.Equal(created) || got[1].Name != "audit-chain@1" ||
		string(got[1].Secret) != "v1-retired" || !got[1].CreatedAt.Equal(t0) || got[2].Name != "search-cursor" {
		t.Fatalf("ListDeploymentKeys = %+v", got)
	}
}
