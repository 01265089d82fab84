package catalog

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// TestBiomesBuiltinNewestOnly: each build publishes the built-in biome under its own version
// at start; the list shows only the newest, marked built in, and every other biome's versions
// all (else the list grows a row per restart with another build).
func TestBiomesBuiltinNewestOnly(t *testing.T) {
	p, _ := newPublisher(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i, v := range []string{"0.0.0+aaaaaaaaaaaa", "0.0.0+bbbbbbbbbbbb", "0.0.0+cccccccccccc"} {
		bv := store.BiomeVersion{ID: BuiltinBiome, Version: v, Manifest: json.RawMessage(`{}`), Contributions: json.RawMessage(`[]`),
			ContentHash: v, DigestHash: v, Digest: json.RawMessage(`{}`), CreatedAt: t0.Add(time.Duration(i) * time.Hour)}
		if err := p.Store.PublishBiome(ctx, bv, nil); err != nil {
			t.Fatalf("publish %s: %v", v, err)
		}
	}
	for _, v := range []string{"1.0.0", "1.1.0"} {
		bv := store.BiomeVersion{ID: "kb", Version: v, Manifest: biomeJSON("kb", v), Contributions: json.RawMessage(`[]`),
			ContentHash: v, DigestHash: v, Digest: json.RawMessage(`{}`), CreatedAt: t0}
		if err := p.Store.PublishBiome(ctx, bv, nil); err != nil {
			t.Fatalf("publish kb %s: %v", v, err)
		}
	}
	bs, err := p.Biomes(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	var builtin, kb []BiomeView
	for _, b := range bs {
		switch b.BiomeID {
		case BuiltinBiome:
			builtin = append(builtin, b)
		case "kb":
			kb = append(kb, b)
		}
	}
	if len(builtin) != 1 || builtin[0].Version != "0.0.0+cccccccccccc" || !builtin[0].BuiltIn {
		t.Errorf("the built-in biome's rows: %+v, want only the newest, built in", builtin)
	}
	if len(kb) != 2 || kb[0].BuiltIn || kb[1].BuiltIn {
		t.Errorf("another biome's rows: %+v, want both versions, not built in", kb)
	}
	// An older build's version stays readable by its own link.
	if b, err := p.Biome(ctx, "acme", BuiltinBiome, "0.0.0+aaaaaaaaaaaa"); err != nil || !b.BuiltIn {
		t.Errorf("an older built-in version: %+v, %v", b, err)
	}
}
