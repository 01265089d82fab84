package policy

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/xemahq/xema/internal/cpubench"
	"github.com/xemahq/xema/internal/grant"
)

// TestSearchableIsSound: every ref the policy allows a caller is in the caller's searchable
// set (policies/search.rego), so search loses nothing by deciding only those. Over every
// decision case with every mutation, each asked for every ref of the data, and every pair of
// mutations for the case's own ref.
func TestSearchableIsSound(t *testing.T) {
	ctx := context.Background()
	e := loadedEngine(t)
	data := testData(t)
	if err := e.Load(ctx, withIndex(t, data), "r1-indexed"); err != nil {
		t.Fatal(err)
	}
	refs := make([]string, 0, len(data["capabilities"].(map[string]any)))
	for ref := range data["capabilities"].(map[string]any) {
		refs = append(refs, ref)
	}
	slices.Sort(refs)
	names := make([]string, 0, len(mutations))
	for n := range mutations {
		names = append(names, n)
	}
	slices.Sort(names)
	var checked, allowed int
	check := func(label string, in Input, refs ...string) {
		t.Helper()
		s, err := e.Searchable(ctx, in)
		if err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		for _, ref := range refs {
			in.Ref = ref
			d, err := e.Decide(ctx, in)
			if err != nil {
				t.Fatalf("%s, %s: %v", label, ref, err)
			}
			checked++
			if !d.Allow {
				continue
			}
			allowed++
			if !s[ref] {
				t.Errorf("%s: %s is allowed but not searchable (searchable: %v)", label, ref, s)
			}
		}
	}
	for _, tc := range decisionCases() {
		check(tc.name, tc.in, refs...)
		for i, a := range names {
			check(tc.name+" / "+a, with(tc.in, mutations[a]), refs...)
			for _, b := range names[i+1:] {
				check(tc.name+" / "+a+" / "+b, with(with(tc.in, mutations[a]), mutations[b]), tc.in.Ref)
			}
		}
	}
	if allowed == 0 {
		t.Fatal("no input was allowed: the check checks nothing")
	}
	t.Logf("%d decisions, %d allowed, each in its caller's searchable set", checked, allowed)
}

// withIndex adds grant.Index of data's grants and descriptors, as grant.Build does.
func withIndex(t testing.TB, data map[string]any) map[string]any {
	t.Helper()
	out, err := grant.WithIndex(data)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// BenchmarkSearchable is the first cut of one caller over n grants (syntheticData).
func BenchmarkSearchable(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("grants=%d", n), func(b *testing.B) {
			e, err := New(ctx, Options{})
			if err != nil {
				b.Fatal(err)
			}
			if err := e.Load(ctx, withIndex(b, syntheticData(n)), "bench"); err != nil {
				b.Fatal(err)
			}
			in := agentCall("")
			in.Subject.Ref, in.Groups = "agent:a2", nil
			b.ReportAllocs()
			done := cpubench.PerOp(b)
			defer done()
			for b.Loop() {
				s, err := e.Searchable(ctx, in)
				if err != nil || len(s) != max(n/4, 1) {
					b.Fatalf("searchable: %d refs, %v; want %d", len(s), err, max(n/4, 1))
				}
			}
		})
	}
}

// TestSearchableWithoutIndexIsAnError: data without grant.Index's indexes has no first cut
// (an error: search then decides every ref), never an empty one that would hide every ref.
func TestSearchableWithoutIndexIsAnError(t *testing.T) {
	ctx := context.Background()
	e := loadedEngine(t) // testdata/data.json: no grantedTo, no baselined
	in := agentCall("")
	if s, err := e.Searchable(ctx, in); err == nil {
		t.Fatalf("searchable %v without the index; want an error", s)
	}
	if err := e.Load(ctx, withIndex(t, testData(t)), "r1-indexed"); err != nil {
		t.Fatal(err)
	}
	if s, err := e.Searchable(ctx, in); err != nil || !s["kb:page.read@1"] {
		t.Fatalf("searchable %v, %v with the index; want kb:page.read@1 in it", s, err)
	}
}
