package policy

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/xemahq/xema/internal/cpubench"
	"github.com/xemahq/xema/internal/grant"
)

// TestSearchableIsSound: over the decision corpus, a caller's search sets are what search
// takes them for. Every ref the policy allows is in the first cut (policies/search.rego), so
// search loses nothing by deciding only those; every ref of the clean set is allowed, so
// search shows nothing the policy would deny. Each decision case with every mutation is
// asked for every ref of the data, and with every pair of mutations for its own ref; the
// decision is asked with the input search gives it (no resource).
//
// It runs with each kind of platform Rego search.rego tells apart: none (the platform's deny
// set is not asked per ref), testdata/custom, and a rule denying one ref by name.
func TestSearchableIsSound(t *testing.T) {
	if raceEnabled {
		// One goroutine over a quadratic corpus: -race finds nothing here and multiplies its
		// minutes; the unraced run of make test checks it whole.
		t.Skip("soundness over the corpus runs without -race")
	}
	byRef := t.TempDir()
	rule := "package xema.custom\n\ndeny contains {\"code\": \"REF_BLOCKED\"} if input.ref == \"kb:page.read@1\"\n"
	if err := os.WriteFile(filepath.Join(byRef, "byref.rego"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, extraDir string }{
		{"no platform Rego", ""},
		{"testdata/custom", filepath.Join("testdata", "custom")},
		{"a rule on input.ref", byRef},
	} {
		t.Run(tc.name, func(t *testing.T) { checkSearchableIsSound(t, tc.extraDir) })
	}
}

func checkSearchableIsSound(t *testing.T, extraDir string) {
	ctx := context.Background()
	e, err := New(ctx, Options{ExtraDir: extraDir})
	if err != nil {
		t.Fatal(err)
	}
	data := searchData(t)
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
	var checked, allowed, clean int
	check := func(label string, in Input, refs ...string) {
		t.Helper()
		in.Resource = ""
		s, err := e.Searchable(ctx, in)
		if err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		for ref := range s.Clean {
			if !s.Cut[ref] {
				t.Errorf("%s: %s is clean but not in the cut", label, ref)
			}
		}
		for _, ref := range refs {
			in.Ref = ref
			d, err := e.Decide(ctx, in)
			if err != nil {
				t.Fatalf("%s, %s: %v", label, ref, err)
			}
			checked++
			switch {
			case d.Allow && !s.Cut[ref]:
				t.Errorf("%s: %s is allowed but not searchable (searchable: %v)", label, ref, s.Cut)
			case !d.Allow && s.Clean[ref]:
				t.Errorf("%s: %s is denied (%v) but in the clean set", label, ref, d.Reasons)
			case d.Allow:
				allowed++
			}
			if d.Allow && s.Clean[ref] {
				clean++
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
	if allowed == 0 || clean == 0 {
		t.Fatalf("%d inputs allowed, %d of them clean: the check checks nothing", allowed, clean)
	}
	t.Logf("%d decisions, %d allowed, each in its caller's searchable set; %d of them in its clean set, which holds no denied ref", checked, allowed, clean)
}

// searchData is testdata/data.json with what else search's sets read: a pinned descriptor
// (versions) that is not safe for agents and explicit-only, a grant filed under another org
// that names acme, a deprecated capability with public output whose grant takes its
// environments from its profile and names a group with false, explicit-only capabilities,
// grants under a biome other than the declaring one, audiences that refuse the output and a
// required binding named badly.
func searchData(t testing.TB) map[string]any {
	data := testData(t)
	caps := data["capabilities"].(map[string]any)
	grants := data["grants"].(map[string]any)
	pinned := maps.Clone(caps["kb:page.write@1"].(map[string]any))
	pinned["safeForAgents"], pinned["humanBaseline"] = false, map[string]any{"kind": "explicit-only"}
	data["versions"] = map[string]any{"kb:page.write@1": map[string]any{"1.0.0": pinned}}
	grants["kb:page.read@1"].(map[string]any)["demo"].(map[string]any)["globex"] = map[string]any{
		"org": "acme", "grantId": "g_9", "biomeVersion": "1.0.0", "environments": map[string]any{"project": true}, "subjects": nil,
	}
	demo := map[string]any{"id": "demo", "version": "1.0.0"}
	caps["kb:page.list@1"] = map[string]any{"biome": demo, "lifecycle": "deprecated", "outputClassification": "public",
		"safeForAgents": true, "instanceGrade": nil, "requiredBindings": []any{}}
	grants["kb:page.list@1"] = map[string]any{"demo": map[string]any{"acme": map[string]any{
		"org": "acme", "grantId": "g_10", "biomeVersion": "1.0.0", "profile": "read-only-assistant",
		"subjects":  map[string]any{"agent:support-bot": true, "group:support": false, "role:reader": true},
		"resources": []any{"kb/*"}, "audience": map[string]any{"public": true},
	}}}
	caps["kb:page.private@1"] = map[string]any{"biome": demo, "lifecycle": "published", "humanBaseline": map[string]any{"kind": "explicit-only"}}
	grants["kb:page.private@1"] = map[string]any{"demo": map[string]any{"acme": map[string]any{
		"org": "acme", "grantId": "g_11", "biomeVersion": "1.0.0", "environments": map[string]any{"project": true, "org": true},
		"subjects": map[string]any{"group:editors": true, "user:bob": false},
	}}}
	// Granted to everyone under another biome than the declaring one: in the cut, but the
	// declaring biome's grant names no one of the corpus.
	grants["kb:page.read@1"].(map[string]any)["other"] = map[string]any{"acme": map[string]any{
		"org": "acme", "grantId": "g_12", "biomeVersion": "1.0.0", "environments": map[string]any{"project": true}, "subjects": nil,
	}}
	caps["kb:page.scoped@1"] = map[string]any{"biome": demo, "lifecycle": "published", "instanceGrade": nil, "requiredBindings": []any{}}
	grants["kb:page.scoped@1"] = map[string]any{
		"demo":  map[string]any{"acme": map[string]any{"org": "acme", "grantId": "g_13", "biomeVersion": "1.0.0", "environments": map[string]any{"project": true}, "subjects": map[string]any{"agent:nobody": true}}},
		"other": map[string]any{"acme": map[string]any{"org": "acme", "grantId": "g_14", "biomeVersion": "1.0.0", "environments": map[string]any{"project": true}, "subjects": nil}},
	}
	// Internal output under a grant admitting public output only, and in a public
	// environment whose kind admits public output only.
	caps["kb:page.audience@1"] = map[string]any{"biome": demo, "lifecycle": "published", "outputClassification": "internal", "instanceGrade": nil, "requiredBindings": []any{}}
	grants["kb:page.audience@1"] = map[string]any{"demo": map[string]any{"acme": map[string]any{
		"org": "acme", "grantId": "g_15", "biomeVersion": "1.0.0", "environments": map[string]any{"project": true}, "subjects": nil, "audience": map[string]any{"public": true},
	}}}
	caps["kb:page.public@1"] = map[string]any{"biome": demo, "lifecycle": "published", "instanceGrade": nil, "requiredBindings": []any{}}
	grants["kb:page.public@1"] = map[string]any{"demo": map[string]any{"acme": map[string]any{
		"org": "acme", "grantId": "g_16", "biomeVersion": "1.0.0", "environments": map[string]any{"public-session": true, "project": true}, "subjects": nil,
	}}}
	// Explicit-only under a grant whose subjects are null: held by no human.
	caps["kb:page.explicit@1"] = map[string]any{"biome": demo, "lifecycle": "published", "humanBaseline": map[string]any{"kind": "explicit-only"}, "instanceGrade": nil, "requiredBindings": []any{}}
	grants["kb:page.explicit@1"] = map[string]any{"demo": map[string]any{"acme": map[string]any{
		"org": "acme", "grantId": "g_17", "biomeVersion": "1.0.0", "environments": map[string]any{"project": true, "org": true}, "subjects": nil,
	}}}
	// A required binding the data names badly (no roleKey fields, no ownerKind).
	caps["kb:page.badbinding@1"] = map[string]any{"biome": demo, "lifecycle": "published", "instanceGrade": nil, "requiredBindings": []any{map[string]any{"roleKey": map[string]any{}}}}
	grants["kb:page.badbinding@1"] = map[string]any{"demo": map[string]any{"acme": map[string]any{
		"org": "acme", "grantId": "g_18", "biomeVersion": "1.0.0", "environments": map[string]any{"project": true}, "subjects": nil,
	}}}
	return data
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
				if err != nil || len(s.Cut) != max(n/4, 1) {
					b.Fatalf("searchable: %d refs, %v; want %d", len(s.Cut), err, max(n/4, 1))
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
		t.Fatalf("searchable %v without the index; want an error", s.Cut)
	}
	if err := e.Load(ctx, withIndex(t, testData(t)), "r1-indexed"); err != nil {
		t.Fatal(err)
	}
	if s, err := e.Searchable(ctx, in); err != nil || !s.Cut["kb:page.read@1"] {
		t.Fatalf("searchable %v, %v with the index; want kb:page.read@1 in it", s.Cut, err)
	}
}
