package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/xemahq/xema/internal/store"
)

// Bench measures the calls on the gateway's hot paths (audit on every call, catalog reads)
// and publishing, on a store from open.
func Bench(b *testing.B, open func(tb testing.TB) store.Store) {
	ctx := context.Background()
	b.Run("PublishBiome10Caps", func(b *testing.B) {
		s := open(b)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			id := fmt.Sprintf("b%d", i)
			caps := make([]store.Capability, 10)
			for j := range caps {
				caps[j] = capability(fmt.Sprintf("%s:thing%d.read@1", id, j), store.LifecyclePublished)
			}
			if err := s.PublishBiome(ctx, biome(id, "1.0.0", "h"+id), caps); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GetCapability", func(b *testing.B) {
		s := open(b)
		if err := s.PublishBiome(ctx, biome("demo", "1.0.0", "h"), []store.Capability{capability("kb:page.read@1", store.LifecyclePublished)}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.GetCapability(ctx, "kb:page.read@1"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ListCapabilities100", func(b *testing.B) {
		s := open(b)
		caps := make([]store.Capability, 100)
		for j := range caps {
			caps[j] = capability(fmt.Sprintf("kb:thing%d.read@1", j), store.LifecyclePublished)
		}
		if err := s.PublishBiome(ctx, biome("demo", "1.0.0", "h"), caps); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.ListCapabilities(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendAudit", func(b *testing.B) {
		s := open(b)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := s.AppendAudit(ctx, AuditRecord(fmt.Sprintf("a-%d", i))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GetAudit", func(b *testing.B) {
		s := open(b)
		if err := s.AppendAudit(ctx, AuditRecord("a-1")); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.GetAudit(ctx, "a-1"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
