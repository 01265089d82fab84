package metatool_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/manifest"
	"github.com/xemahq/xema/internal/metatool"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/policy/policyfixture"
	"github.com/xemahq/xema/internal/store"
)

type fixedCatalog struct{ snap *catalog.Snapshot }

func (c fixedCatalog) Snapshot() *catalog.Snapshot { return c.snap }

type discardAudit struct{}

func (discardAudit) Append(context.Context, store.AuditRecord) error { return nil }

const searchBiomes = 20

// searchTools are the meta-tools over n published capabilities in 20 biomes of org acme, each
// biome granted to its own agent (agent:a0 … agent:a19): a caller is authorized for 5 % of
// the catalog. The policy is the real one over data in the contract's layout.
func searchTools(b *testing.B, n int) *metatool.Tools {
	b.Helper()
	data := policyfixture.Data(b)
	caps, grants := make(map[string]any, n), make(map[string]any, n)
	entries := make([]*catalog.Entry, 0, n)
	for i := range n {
		biome := fmt.Sprintf("b%d", i%searchBiomes)
		ref := fmt.Sprintf("%s:page%d.read@1", biome, i)
		caps[ref] = map[string]any{
			"biome": map[string]any{"id": biome, "version": "1.0.0"}, "lifecycle": "published",
			"riskTier": "low", "effectClass": "read", "outputClassification": "internal",
			"requiresApproval": false, "safeForAgents": true, "humanBaseline": nil,
			"requiredBindings": []any{}, "instanceGrade": nil,
		}
		grants[ref] = map[string]any{biome: map[string]any{"acme": map[string]any{
			"grantId": "g_" + ref, "org": "acme", "biomeVersion": "1.0.0",
			"profile": "read-only-assistant", "environments": map[string]any{"project": true},
			"subjects":  map[string]any{fmt.Sprintf("agent:a%d", i%searchBiomes): true},
			"resources": []any{"*"}, "requiresApproval": false, "audience": map[string]any{"internal": true},
		}}}
		entries = append(entries, &catalog.Entry{
			Capability: store.Capability{Ref: ref, BiomeID: biome, BiomeVersion: "1.0.0", Lifecycle: store.LifecyclePublished},
			Manifest: manifest.Manifest{Ref: ref, Title: fmt.Sprintf("Read page %d", i), Summary: "Reads one knowledge-base page",
				EffectClass: "read", RiskTier: "low",
				InputSchema: map[string]any{"type": "object", "properties": map[string]any{
					"pageId": map[string]any{"type": "string", metatool.ResourceTypeAnnotation: "kb.page"}}}},
		})
	}
	data["capabilities"], data["grants"] = caps, grants
	return toolsOver(b, data, entries, 4*n)
}

// toolsOver are the meta-tools over entries and the real policy with data, its engine's
// decision cache of cacheSize entries (negative: off).
func toolsOver(tb testing.TB, data map[string]any, entries []*catalog.Entry, cacheSize int) *metatool.Tools {
	tb.Helper()
	return toolsDeciding(tb, entries, engineOver(tb, data, cacheSize))
}

// engineOver is the real policy over data (indexed as grant.Build does), its decision cache
// of cacheSize entries (negative: off).
func engineOver(tb testing.TB, data map[string]any, cacheSize int) *policy.Engine {
	tb.Helper()
	ctx := context.Background()
	data, err := grant.WithIndex(data)
	if err != nil {
		tb.Fatal(err)
	}
	eng, err := policy.New(ctx, policy.Options{DecisionCacheSize: cacheSize})
	if err != nil {
		tb.Fatal(err)
	}
	if err := eng.Load(ctx, data, "bench"); err != nil {
		tb.Fatal(err)
	}
	return eng
}

// toolsDeciding are the meta-tools over entries, asking dec, beside a funnel over the same.
func toolsDeciding(tb testing.TB, entries []*catalog.Entry, dec metatool.Decider) *metatool.Tools {
	tb.Helper()
	cat := fixedCatalog{catalog.SnapshotOf(1, entries)}
	gw, err := gateway.New(gateway.Deps{Catalog: cat, Policy: dec, Audit: discardAudit{}, Kernel: kernel.New(), HTTP: http.DefaultClient})
	if err != nil {
		tb.Fatal(err)
	}
	tools, err := metatool.New(metatool.Deps{Catalog: cat, Policy: dec, Runners: gw, CursorKey: []byte("bench")})
	if err != nil {
		tb.Fatal(err)
	}
	return tools
}

// caller is agent:a0 of acme; session distinguishes callers (a new session is a cold
// caller: nothing of it is remembered, and no decision of it is cached).
func caller(session int) identity.ExecContext {
	return identity.ExecContext{Subject: identity.Subject{Kind: "agent", Ref: "agent:a0"}, OrgRole: "org_member",
		Org: "acme", Environment: "project", Armed: []string{"*"}, Session: fmt.Sprintf("s%d", session)}
}

// reportHeap reports the heap in use with the fixture loaded (catalog, policy data, engine,
// one caller's view), after a collection: what n capabilities and grants cost in memory.
func reportHeap(b *testing.B) {
	b.StopTimer()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
}

// latencies reports the p50 and p99 of the measured calls next to the mean ns/op.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	slices.Sort(l)
	at := func(q float64) float64 { return float64(l[int(q*float64(len(l)-1))].Microseconds()) / 1000 }
	b.ReportMetric(at(0.5), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// BenchmarkSearch is a search matching every capability (limit 20) by a caller authorized
// for 5 % of them: warm (the same caller again: the authorized set is remembered) and cold
// (a new caller each time: the policy's first cut, then one decision per capability in it).
func BenchmarkSearch(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{10_000, 100_000} {
		gw := searchTools(b, n)
		req := metatool.SearchRequest{Query: "page", Limit: 20}
		check := func(b *testing.B, res *metatool.SearchResult, err error) {
			if err != nil || res.ConsideredCount != n/searchBiomes || len(res.Capabilities) != 20 {
				b.Fatalf("search: %d considered, %d shown, %v; want %d and 20", res.ConsideredCount, len(res.Capabilities), err, n/searchBiomes)
			}
		}
		b.Run(fmt.Sprintf("caps=%d/warm", n), func(b *testing.B) {
			res, err := gw.Search(ctx, caller(0), req)
			check(b, res, err)
			lat := make(latencies, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				res, err := gw.Search(ctx, caller(0), req)
				lat = append(lat, time.Since(start))
				check(b, res, err)
			}
			lat.report(b)
			reportHeap(b)
		})
		b.Run(fmt.Sprintf("caps=%d/cold", n), func(b *testing.B) {
			lat := make(latencies, 0, b.N)
			for i := range b.N {
				start := time.Now()
				res, err := gw.Search(ctx, caller(i+1), req)
				lat = append(lat, time.Since(start))
				check(b, res, err)
			}
			lat.report(b)
		})
	}
}

// BenchmarkDescribe describes 20 refs the caller may invoke, warm and cold, at 10,000 and
// 100,000 capabilities.
func BenchmarkDescribe(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{10_000, 100_000} {
		gw := searchTools(b, n)
		var refs []string
		for i := 0; len(refs) < 20; i += searchBiomes {
			refs = append(refs, fmt.Sprintf("b0:page%d.read@1", i))
		}
		req := metatool.DescribeRequest{Refs: refs}
		for _, warm := range []bool{true, false} {
			b.Run(fmt.Sprintf("caps=%d/warm=%v", n, warm), func(b *testing.B) {
				lat := make(latencies, 0, b.N)
				for i := range b.N {
					ec := caller(0)
					if !warm {
						ec = caller(i + 1)
					}
					start := time.Now()
					d, err := gw.Describe(ctx, ec, req)
					lat = append(lat, time.Since(start))
					if err != nil || len(d) != len(refs) {
						b.Fatalf("describe: %d of %d, %v", len(d), len(refs), err)
					}
				}
				lat.report(b)
			})
		}
	}
}
