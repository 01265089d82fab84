package policy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/cpubench"
)

// syntheticData lays out n grants in the contract's layout: n/4 capabilities over 50
// domains, each granted to 4 biomes in org acme.
func syntheticData(n int) map[string]any {
	const biomesPerRef = 4
	refs := max(n/biomesPerRef, 1)
	caps := make(map[string]any, refs)
	grants := make(map[string]any, refs)
	for i := range refs {
		ref := syntheticRef(i)
		caps[ref] = map[string]any{
			"biome": map[string]any{"id": "b0", "version": "1.0.0"}, "lifecycle": "published",
			"riskTier": "low", "effectClass": "read", "outputClassification": "internal",
			"requiresApproval": false, "safeForAgents": true, "delegable": true, "humanBaseline": nil,
			"requiredBindings": []any{}, "instanceGrade": nil,
		}
		perBiome := make(map[string]any, biomesPerRef)
		for b := range biomesPerRef {
			perBiome[fmt.Sprintf("b%d", b)] = map[string]any{"acme": map[string]any{
				"grantId": fmt.Sprintf("g_%d_%d", i, b), "org": "acme", "biomeVersion": "1.0.0",
				"profile": "read-only-assistant", "environments": map[string]any{"project": true},
				"subjects":  map[string]any{"group:support": true, fmt.Sprintf("agent:a%d", b): true},
				"resources": []any{fmt.Sprintf("kb/%d/*", i)}, "requiresApproval": false,
				"audience":  map[string]any{"internal": true},
				"rateLimit": map[string]any{"requests": 60, "per": "1m"},
			}}
		}
		grants[ref] = perBiome
	}
	data := testData(nil)
	data["capabilities"] = caps
	data["grants"] = grants
	return data
}

// syntheticEngine is an engine with syntheticData(n) loaded and its decision cache off.
func syntheticEngine(tb testing.TB, n int) *Engine {
	tb.Helper()
	ctx := context.Background()
	e, err := New(ctx, Options{DecisionCacheSize: -1})
	if err != nil {
		tb.Fatal(err)
	}
	if err := e.Load(ctx, syntheticData(n), "bench"); err != nil {
		tb.Fatal(err)
	}
	return e
}

func syntheticRef(i int) string { return fmt.Sprintf("d%d:res%d.read@1", i%50, i) }

// benchCalls are an allowed and a denied call of a ref in the middle of the key space of
// syntheticData(n).
func benchCalls(n int) (allow, deny Input) {
	i := n / 8
	allow = agentCall(syntheticRef(i))
	allow.Biome = "b2"
	allow.Resource = fmt.Sprintf("kb/%d/page", i)
	deny = with(allow, func(in *Input) {
		in.Resource = "kb/other/page"
		in.Environment = "app"
	})
	return allow, deny
}

// BenchmarkDecision is the uncached decision (the engine's decision cache is off) of a
// key whose residuals are ready: repeated traffic, as here, has them prepared in the
// background; BenchmarkFirstCall is a key's first call. Three calls: an allowed one, a denied
// one, and the allowed one made by its agent for a person (input.delegation).
func BenchmarkDecision(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("grants=%d", n), func(b *testing.B) {
			e := syntheticEngine(b, n)
			allow, deny := benchCalls(n)
			for _, c := range []struct {
				name  string
				in    Input
				allow bool
			}{{"allow", allow, true}, {"deny", deny, false}, {"delegated", forAnn(allow), true}} {
				b.Run(c.name, func(b *testing.B) {
					for range 2 { // the key's entry, then (deny) its residual of full_decision
						if _, err := e.Decide(ctx, c.in); err != nil {
							b.Fatal(err)
						}
						settle(b, e)
					}
					b.ReportAllocs()
					done := cpubench.PerOp(b)
					defer done()
					for b.Loop() {
						d, err := e.Decide(ctx, c.in)
						if err != nil || d.Allow != c.allow {
							b.Fatalf("decision %+v, %v", d, err)
						}
					}
				})
			}
		})
	}
}

// BenchmarkFirstCall compares the first calls of new keys with warm calls (10,000 grants,
// cache off): each iteration calls firstCallKeys keys never called before, one after the
// other, while the worker prepares them in the background, then (the worker idle) calls
// each again with another resource. It reports the p50 and p99 of both, and the ratio of
// the p99s. Run with -benchtime Nx (N ≤ 10).
func BenchmarkFirstCall(b *testing.B) {
	const n, firstCallKeys = 10_000, 200
	ctx := context.Background()
	e := syntheticEngine(b, n)
	var first, warm []time.Duration
	next := 0
	call := func(i int, resource string) time.Duration {
		in := agentCall(syntheticRef(i / 4))
		in.Biome = fmt.Sprintf("b%d", i%4)
		in.Resource = fmt.Sprintf("kb/%d/%s", i/4, resource)
		start := time.Now()
		d, err := e.Decide(ctx, in)
		took := time.Since(start)
		if err != nil || !d.Allow {
			b.Fatalf("decision %+v, %v", d, err)
		}
		return took
	}
	for b.Loop() {
		if next+firstCallKeys > n {
			b.Fatalf("out of new keys: run with -benchtime %dx at most", n/firstCallKeys)
		}
		keys := make([]int, firstCallKeys)
		for k := range keys {
			keys[k] = next
			next++
		}
		for _, i := range keys {
			first = append(first, call(i, "page"))
		}
		settle(b, e)
		for _, i := range keys {
			warm = append(warm, call(i, "other"))
		}
	}
	cpubench.ReportFirstAndWarm(b, first, warm)
}

// BenchmarkDecisionCache runs the engine with its decision cache on (the default): "hit"
// repeats one call; "miss" names a distinct resource on every call (cache-defeating
// traffic: every call is evaluated, plus the cost of keying and storing it).
func BenchmarkDecisionCache(b *testing.B) {
	ctx := context.Background()
	const n = 10_000
	e, err := New(ctx, Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Load(ctx, syntheticData(n), "bench"); err != nil {
		b.Fatal(err)
	}
	i := n / 8
	in := agentCall(syntheticRef(i))
	in.Biome = "b2"
	in.Resource = fmt.Sprintf("kb/%d/page", i)
	b.Run("hit", func(b *testing.B) {
		b.ReportAllocs()
		done := cpubench.PerOp(b)
		defer done()
		for b.Loop() {
			if d, err := e.Decide(ctx, in); err != nil || !d.Allow {
				b.Fatalf("decision %+v, %v", d, err)
			}
		}
	})
	k := 0 // across runs too: no resource repeats
	b.Run("miss", func(b *testing.B) {
		b.ReportAllocs()
		done := cpubench.PerOp(b)
		defer done()
		for b.Loop() {
			k++
			in := in
			in.Resource = fmt.Sprintf("kb/%d/page-%d", i, k)
			if d, err := e.Decide(ctx, in); err != nil || !d.Allow {
				b.Fatalf("decision %+v, %v", d, err)
			}
		}
	})
	st := e.CacheStats()
	b.Logf("cache: %d hits, %d misses, %d entries", st.Hits, st.Misses, st.Entries)
}
