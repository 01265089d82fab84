package policy

import (
	"context"
	"fmt"
	"testing"

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
			"requiresApproval": false, "safeForAgents": true, "humanBaseline": nil,
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

// BenchmarkDecision is the uncached decision: the engine's decision cache is off.
func BenchmarkDecision(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("grants=%d", n), func(b *testing.B) {
			e := syntheticEngine(b, n)
			allow, deny := benchCalls(n)
			// Preparations unspaced (prepareEvery): the deny call's residual of full_decision
			// is made in its warm-up, not in the loop, a few ms after the allow call's entry.
			e.serving.Load().fast.every = 0
			for _, c := range []struct {
				name  string
				in    Input
				allow bool
			}{{"allow", allow, true}, {"deny", deny, false}} {
				b.Run(c.name, func(b *testing.B) {
					// A key's residuals are prepared on its second call and its first call that
					// is not clean (fast.go): repeated traffic, as here, has them ready;
					// BenchmarkDecisionNewKey is the cost.
					for range 2 {
						if _, err := e.Decide(ctx, c.in); err != nil {
							b.Fatal(err)
						}
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

// BenchmarkDecisionNewKey is the first two calls of a key (10,000 grants, cache off,
// preparations not spaced): the first is evaluated in full, the second partially evaluates
// clean and clean_decision for the key, compiles the residual and evaluates it.
func BenchmarkDecisionNewKey(b *testing.B) {
	ctx := context.Background()
	const n = 10_000
	e := syntheticEngine(b, n)
	e.serving.Load().fast.every = 0
	b.ReportAllocs()
	done := cpubench.PerOp(b)
	defer done()
	i := 0
	for b.Loop() {
		in := agentCall(syntheticRef(i % (n / 4)))
		in.Biome = "b2"
		in.Resource = fmt.Sprintf("kb/%d/page", i%(n/4))
		i++
		for range 2 {
			if d, err := e.Decide(ctx, in); err != nil || !d.Allow {
				b.Fatalf("decision %+v, %v", d, err)
			}
		}
	}
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
