package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// testAuditScan: ScanAudit pages through more records than one page in order and filters by
// time, org, replayability and chain; AppendAudits checkpoints each chain's last link, never
// moving a head backwards.
func testAuditScan(t *testing.T, s store.Store) {
	ctx := context.Background()
	const n = 1500 // more than one page
	var batch []store.AuditRecord
	for i := range n {
		r := AuditRecord(fmt.Sprintf("s-%05d", i))
		r.Time = t0.Add(time.Duration(i) * time.Millisecond)
		r.Org = []string{"acme", "beta"}[i%2]
		if i%3 == 0 {
			r.PolicyInput = json.RawMessage(`{"ref": "kb:page.read@1", "org": "` + r.Org + `"}`)
		}
		r.Chain = store.ChainLink{ChainID: "ch_a", Seq: int64(i + 1), Hash: fmt.Sprintf("h%d", i+1)}
		batch = append(batch, r)
		if len(batch) == 500 {
			if err := s.AppendAudits(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	count := func(f store.AuditFilter) (int, []store.AuditRecord) {
		t.Helper()
		var got []store.AuditRecord
		if err := s.ScanAudit(ctx, f, func(r store.AuditRecord) error { got = append(got, r); return nil }); err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(got); i++ {
			if f.ChainID != "" && got[i].Chain.Seq <= got[i-1].Chain.Seq || f.ChainID == "" && got[i].Time.Before(got[i-1].Time) {
				t.Fatalf("scan out of order at %d: %s after %s", i, got[i].ID, got[i-1].ID)
			}
		}
		return len(got), got
	}
	for _, tc := range []struct {
		name string
		f    store.AuditFilter
		want int
	}{
		{"all", store.AuditFilter{}, n},
		{"since", store.AuditFilter{Since: t0.Add(1000 * time.Millisecond)}, 500},
		{"until", store.AuditFilter{Until: t0.Add(10 * time.Millisecond)}, 10},
		{"org", store.AuditFilter{Org: "beta"}, n / 2},
		{"replayable", store.AuditFilter{Replayable: true}, n / 3},
		{"chain", store.AuditFilter{ChainID: "ch_a"}, n},
		{"unknown chain", store.AuditFilter{ChainID: "ch_none"}, 0},
	} {
		if got, _ := count(tc.f); got != tc.want {
			t.Errorf("%s: %d records, want %d", tc.name, got, tc.want)
		}
	}
	_, got := count(store.AuditFilter{Until: t0.Add(time.Millisecond)})
	if len(got) != 1 || string(got[0].PolicyInput) != `{"ref": "kb:page.read@1", "org": "acme"}` || got[0].Chain.Hash != "h1" || got[0].Org != "acme" {
		t.Errorf("round trip: %+v", got)
	}
	stop := errors.New("stop")
	if err := s.ScanAudit(ctx, store.AuditFilter{}, func(store.AuditRecord) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("ScanAudit returned %v, want fn's error", err)
	}

	heads, err := s.ChainHeads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(heads) != 1 || heads[0].ChainID != "ch_a" || heads[0].Seq != n || heads[0].Hash != fmt.Sprintf("h%d", n) {
		t.Fatalf("heads = %+v, want ch_a at %d", heads, n)
	}
	// A batch carrying an older link of the chain (never written by the gateway) does not move the head back.
	old := AuditRecord("s-old")
	old.Chain = store.ChainLink{ChainID: "ch_a", Seq: 3, Hash: "h3"}
	if err := s.AppendAudits(ctx, []store.AuditRecord{old}); err != nil {
		t.Fatal(err)
	}
	if heads, _ = s.ChainHeads(ctx); heads[0].Seq != n {
		t.Errorf("head moved back to %d", heads[0].Seq)
	}
}

// testBiomeOwners: the first version of an id claims it; another owner's version is ErrOwned
// and stores nothing.
func testBiomeOwners(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := biome("owned", "1.0.0", "h1")
	a.Owner = "acme"
	if err := s.PublishBiome(ctx, a, nil); err != nil {
		t.Fatal(err)
	}
	b := biome("owned", "1.0.1", "h2")
	b.Owner = "beta"
	if err := s.PublishBiome(ctx, b, nil); !errors.Is(err, store.ErrOwned) {
		t.Fatalf("another org's version: %v, want ErrOwned", err)
	}
	if _, err := s.GetBiomeVersion(ctx, "owned", "1.0.1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused version was stored: %v", err)
	}
	op := biome("operators", "1.0.0", "h3")
	if err := s.PublishBiome(ctx, op, nil); err != nil {
		t.Fatal(err)
	}
	owners, err := s.BiomeOwners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if owners["owned"] != "acme" || owners["operators"] != "" || len(owners) != 2 {
		t.Fatalf("owners = %v", owners)
	}
}
