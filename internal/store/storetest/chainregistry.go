package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// testChainRegistry: a registration stores its chain's empty head with it, in order of its
// number; a taken number or chain id is ErrConflict and stores nothing; malformed ones are
// ErrInvalid; a batch moves the head on with its MAC.
func testChainRegistry(t *testing.T, s store.Store) {
	ctx := context.Background()
	at := time.Date(2026, 12, 5, 13, 0, 0, 0, time.UTC)
	reg := func(no int64, id string) store.ChainRegistration {
		return store.ChainRegistration{No: no, ChainID: id, RegisteredAt: at, Anchor: "prev", MAC: "mac-" + id}
	}
	head := func(id string) store.ChainHead { return store.ChainHead{ChainID: id, MAC: "head-" + id} }
	for _, tc := range []struct {
		name string
		reg  store.ChainRegistration
		head store.ChainHead
	}{
		{"number 0", reg(0, "ch_a"), head("ch_a")},
		{"no chain id", reg(1, ""), head("")},
		{"no MAC", store.ChainRegistration{No: 1, ChainID: "ch_a"}, head("ch_a")},
		{"head of another chain", reg(1, "ch_a"), head("ch_b")},
		{"head without MAC", reg(1, "ch_a"), store.ChainHead{ChainID: "ch_a"}},
		{"head past seq 0", reg(1, "ch_a"), store.ChainHead{ChainID: "ch_a", Seq: 3, MAC: "m"}},
		{"negative legacy count", store.ChainRegistration{No: 1, ChainID: "ch_a", MAC: "m", Legacy: -1}, head("ch_a")},
	} {
		if err := s.RegisterChain(ctx, tc.reg, tc.head); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: RegisterChain = %v, want ErrInvalid", tc.name, err)
		}
	}
	if err := s.RegisterChain(ctx, reg(2, "ch_b"), head("ch_b")); err != nil {
		t.Fatal(err)
	}
	first := reg(1, "ch_a")
	first.Legacy = 4
	if err := s.RegisterChain(ctx, first, head("ch_a")); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]store.ChainRegistration{"number taken": reg(2, "ch_c"), "chain taken": reg(3, "ch_a")} {
		if err := s.RegisterChain(ctx, r, head(r.ChainID)); !errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: RegisterChain = %v, want ErrConflict", name, err)
		}
	}
	regs, err := s.ChainRegistrations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(regs) != 2 || regs[0].ChainID != "ch_a" || regs[0].Legacy != 4 || regs[1].No != 2 || regs[1].Anchor != "prev" ||
		regs[1].MAC != "mac-ch_b" || !regs[1].RegisteredAt.Equal(at) {
		t.Fatalf("ChainRegistrations = %+v", regs)
	}
	if err := s.AppendAudits(ctx, []store.AuditRecord{{ID: "inv_r1", Decision: "allowed",
		Chain: store.ChainLink{ChainID: "ch_a", Seq: 1, Hash: "h1", HeadMAC: "head-1"}}}); err != nil {
		t.Fatal(err)
	}
	heads, err := s.ChainHeads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]store.ChainHead{}
	for _, h := range heads {
		got[h.ChainID] = h
	}
	if h := got["ch_a"]; h.Seq != 1 || h.Hash != "h1" || h.MAC != "head-1" {
		t.Fatalf("ch_a's head after a batch = %+v", h)
	}
	if h := got["ch_b"]; h.Seq != 0 || h.Hash != "" || h.MAC != "head-ch_b" || len(heads) != 2 {
		t.Fatalf("heads = %+v", heads)
	}
}
