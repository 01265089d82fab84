package policy

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/open-policy-agent/opa/v1/rego"
)

func sortedMutations() []string {
	names := make([]string, 0, len(mutations))
	for n := range mutations {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// corpus is every decision case, each alone, with every mutation and with every pair of
// mutations (the inputs TestCleanIsSound checks), in a fixed order.
func corpus() []decisionCase {
	names := sortedMutations()
	var out []decisionCase
	for _, tc := range decisionCases() {
		out = append(out, tc)
		for i, a := range names {
			out = append(out, decisionCase{name: tc.name + " / " + a, in: with(tc.in, mutations[a])})
			for _, b := range names[i+1:] {
				out = append(out, decisionCase{name: tc.name + " / " + a + " / " + b, in: with(with(tc.in, mutations[a]), mutations[b])})
			}
		}
	}
	return out
}

// fastMismatches decides every input of the corpus by the fast path (Engine.Decide, cache
// off, through compiled.fast) and by evaluating the policy in full, and lists the inputs whose decisions differ in
// any field; fast counts the inputs the fast path decided.
func fastMismatches(t *testing.T, e *Engine) (mismatches []string, fast, allowed, denied int) {
	t.Helper()
	ctx := context.Background()
	c := e.serving.Load()
	for _, tc := range corpus() {
		want, err := c.evaluate(ctx, tc.in)
		if err != nil {
			t.Fatalf("%s: full evaluation: %v", tc.name, err)
		}
		got, ok, err := c.fast.decide(ctx, tc.in)
		if err != nil {
			t.Fatalf("%s: fast path: %v", tc.name, err)
		}
		if want.Allow {
			allowed++
		} else {
			denied++
		}
		if !ok {
			continue
		}
		fast++
		if !reflect.DeepEqual(got, want) {
			mismatches = append(mismatches, tc.name)
			if len(mismatches) <= 5 {
				t.Logf("%s:\n fast %+v\n full %+v", tc.name, got, want)
			}
		}
	}
	return mismatches, fast, allowed, denied
}

func uncachedEngine(t *testing.T) *Engine {
	t.Helper()
	ctx := context.Background()
	e, err := New(ctx, Options{ExtraDir: "testdata/custom", DecisionCacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(ctx, testData(t), "r1"); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestFastPathEquivalent: the fast path decides every input of the corpus exactly as the
// full evaluation does (every field), allowed and denied.
func TestFastPathEquivalent(t *testing.T) {
	e := uncachedEngine(t)
	mismatches, fast, allowed, denied := fastMismatches(t, e)
	if len(mismatches) > 0 {
		t.Errorf("%d inputs decided differently by the fast path", len(mismatches))
	}
	if fast == 0 || allowed == 0 || denied == 0 {
		t.Fatalf("corpus does not exercise both paths: fast %d, allowed %d, denied %d", fast, allowed, denied)
	}
	t.Logf("%d inputs (%d allowed, %d denied), %d decided by the fast path", allowed+denied, allowed, denied, fast)
}

// TestFastPathEquivalenceCanFail: a residual that always holds (clean's conditions
// dropped) is caught by the comparison of TestFastPathEquivalent.
func TestFastPathEquivalenceCanFail(t *testing.T) {
	ctx := context.Background()
	e := uncachedEngine(t)
	c := e.serving.Load()
	always, err := rego.New(rego.Query("true"), rego.Store(c.store)).PrepareForEval(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range decisionCases() {
		key := fastKey{ref: tc.in.Ref, org: tc.in.Org, biome: tc.in.Biome}
		ent, err := c.fast.prepare(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if ent.residual != nil {
			ent.residual = &always
		}
		c.fast.entries.Put(key, ent)
	}
	mismatches, _, _, _ := fastMismatches(t, e)
	if len(mismatches) == 0 {
		t.Fatal("a fast path that ignores clean went unnoticed")
	}
	t.Logf("broken fast path: %d inputs decided differently", len(mismatches))
}
