package policy

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
func corpus() []decisionCase { return mutated(decisionCases()) }

func mutated(cases []decisionCase) []decisionCase {
	names := sortedMutations()
	var out []decisionCase
	for _, tc := range cases {
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

// settle waits until the background worker of e's serving bundle has prepared every key
// asked for (a bound only against a hung worker, not a timing assertion).
func settle(t testing.TB, e *Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := e.WaitPrepared(ctx); err != nil {
		t.Fatalf("the fast path's worker never went idle: %v", err)
	}
}

// fastDecide decides in as Decide does without the cache: the fast path, then the full
// evaluation it leaves the call to.
func fastDecide(ctx context.Context, c *compiled, in Input) (Decision, outcome, error) {
	d, out, err := c.fast.decide(ctx, in, inputValue(in))
	switch {
	case err != nil:
		return d, out, err
	case out == notClean:
		d, err = c.evaluate(ctx, c.full, in.Ref, inputValue(in))
	case out == undecided:
		d, err = c.evaluate(ctx, c.query, in.Ref, inputValue(in))
	}
	return d, out, err
}

// fastMismatches decides every input of cases as Decide does, first with the key's
// residuals not prepared, then (the worker idle again) prepared, then once more after its
// residual of full_decision was asked for, and compares every field with full_decision
// evaluated in full: the policy's decision without any shortcut (no clean). So it fails
// when the fast path or fast.rego's clean is wrong. byClean and byFull count the inputs
// the residuals of clean and of full_decision decided.
func fastMismatches(t *testing.T, e *Engine, cases []decisionCase) (mismatches []string, byClean, byFull, allowed, denied int) {
	t.Helper()
	ctx := context.Background()
	c := e.serving.Load()
	for _, tc := range cases {
		want, err := c.evaluate(ctx, c.full, tc.in.Ref, inputValue(tc.in))
		if err != nil {
			t.Fatalf("%s: full evaluation: %v", tc.name, err)
		}
		if want.Allow {
			allowed++
		} else {
			denied++
		}
		for round := range 3 {
			got, out, err := fastDecide(ctx, c, tc.in)
			if err != nil {
				t.Fatalf("%s: fast path: %v", tc.name, err)
			}
			switch out {
			case decidedClean:
				byClean++
			case decidedFull:
				byFull++
			}
			if !reflect.DeepEqual(got, want) {
				mismatches = append(mismatches, tc.name)
				if len(mismatches) <= 5 {
					t.Logf("%s (round %d, outcome %d):\n fast %+v\n full %+v", tc.name, round, out, got, want)
				}
			}
			settle(t, e)
		}
	}
	return mismatches, byClean, byFull, allowed, denied
}

func uncachedEngine(t testing.TB) *Engine {
	t.Helper()
	ctx := context.Background()
	e, err := New(ctx, Options{ExtraDir: "testdata/custom", DecisionCacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(ctx, testData(t), "r1"); err != nil {
		t.Fatal(err)
	}
	e.serving.Load().fast.pause.Store(0)
	return e
}

// TestFastPathEquivalent: the fast path decides every input of the corpus exactly as the
// full evaluation does (every field), allowed and denied, before and after the key's
// residuals of clean and of full_decision are ready; and so for the benchmark's calls, with
// their mutations, over the benchmark's data.
func TestFastPathEquivalent(t *testing.T) {
	allow, deny := benchCalls(100)
	cases := corpus()
	if testing.Short() || raceEnabled {
		cases = mutated(decisionCases()[:6])
	}
	for _, run := range []struct {
		name  string
		e     *Engine
		cases []decisionCase
	}{
		{"fixture", uncachedEngine(t), cases},
		{"synthetic", syntheticEngine(t, 100), mutated([]decisionCase{{name: "allow", in: allow}, {name: "deny", in: deny}})},
	} {
		t.Run(run.name, func(t *testing.T) {
			mismatches, byClean, byFull, allowed, denied := fastMismatches(t, run.e, run.cases)
			if len(mismatches) > 0 {
				t.Errorf("%d decisions differ from the full evaluation", len(mismatches))
			}
			if byClean == 0 || byFull == 0 || allowed == 0 || denied == 0 {
				t.Fatalf("corpus does not exercise every path: residual of clean %d, of full_decision %d, allowed %d, denied %d",
					byClean, byFull, allowed, denied)
			}
			t.Logf("%d inputs (%d allowed, %d denied), three calls each: %d decided by the residual of clean, %d by that of full_decision",
				allowed+denied, allowed, denied, byClean, byFull)
		})
	}
}

// prepareKeys has the worker prepare the keys of cases (and their residuals of
// full_decision) and waits for it.
func prepareKeys(t *testing.T, e *Engine, cases []decisionCase) {
	t.Helper()
	f := e.serving.Load().fast
	for _, tc := range cases {
		f.want(fastKey{ref: tc.in.Ref, org: tc.in.Org, biome: tc.in.Biome}, true)
	}
	settle(t, e)
}

// TestFastPathEquivalenceCanFail: a residual of clean that always holds (clean's
// conditions dropped), or a residual of full_decision that denies with no reason, is
// caught by the comparison of TestFastPathEquivalent.
func TestFastPathEquivalenceCanFail(t *testing.T) {
	ctx := context.Background()
	for _, broken := range []struct {
		name, query, module string
		set                 func(ent *fastEntry, q *rego.PreparedEvalQuery)
	}{
		{"clean always holds", "true", "", func(ent *fastEntry, q *rego.PreparedEvalQuery) {
			if ent.clean != nil {
				ent.clean = q
			}
		}},
		{"full_decision without reasons", "data.t.d", `package t
d := {"allow": false, "reasons": [], "suggestions": [], "obligations": [], "revision": "r1"}
`, func(ent *fastEntry, q *rego.PreparedEvalQuery) { ent.full.Store(&fullResidual{q: q}) }},
	} {
		t.Run(broken.name, func(t *testing.T) {
			e := uncachedEngine(t)
			c := e.serving.Load()
			opts := []func(*rego.Rego){rego.Query(broken.query), rego.Store(c.store)}
			if broken.module != "" {
				opts = append(opts, rego.Module("t.rego", broken.module))
			}
			q, err := rego.New(opts...).PrepareForEval(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cases := decisionCases()
			prepareKeys(t, e, cases)
			for _, ent := range *c.fast.entries.Load() {
				broken.set(ent, &q)
			}
			mismatches, _, _, _, _ := fastMismatches(t, e, mutated(cases[:8]))
			if len(mismatches) == 0 {
				t.Fatal("a broken fast path went unnoticed")
			}
			t.Logf("broken fast path: %d decisions differ", len(mismatches))
		})
	}
}

// TestFastPathFailsClosed: an error of a residual's evaluation (clean's for an allowed
// call, full_decision's for a denied one) is the decision's error, never an allow, and
// never a fall back to another answer.
func TestFastPathFailsClosed(t *testing.T) {
	ctx := context.Background()
	read := agentCall("kb:page.read@1")
	for _, run := range []struct {
		name  string
		in    Input
		allow bool
		set   func(ent *fastEntry, q *rego.PreparedEvalQuery)
	}{
		{"clean", read, true, func(ent *fastEntry, q *rego.PreparedEvalQuery) { ent.clean = q }},
		{"full_decision", with(read, func(in *Input) { in.Environment = "org" }), false,
			func(ent *fastEntry, q *rego.PreparedEvalQuery) { ent.full.Store(&fullResidual{q: q}) }},
	} {
		t.Run(run.name, func(t *testing.T) {
			e := uncachedEngine(t)
			c := e.serving.Load()
			if d, err := e.Decide(ctx, run.in); err != nil || d.Allow != run.allow {
				t.Fatalf("decision %+v, %v: want allow %v", d, err, run.allow)
			}
			// Two values for one complete rule: an evaluation error (conflict) on every call.
			conflict, err := rego.New(rego.Query("data.t.p"), rego.Store(c.store), rego.Module("t.rego", `package t
p := 1 if input.ref
p := 2 if input.org
`)).PrepareForEval(ctx)
			if err != nil {
				t.Fatal(err)
			}
			prepareKeys(t, e, []decisionCase{{in: run.in}})
			ent := (*c.fast.entries.Load())[fastKey{ref: run.in.Ref, org: run.in.Org, biome: run.in.Biome}]
			if ent == nil || ent.clean == nil {
				t.Fatalf("entry %+v: want a residual of clean", ent)
			}
			run.set(ent, &conflict)
			d, err := e.Decide(ctx, run.in)
			if err == nil || d.Allow {
				t.Fatalf("decision %+v, %v: want an error and no allow", d, err)
			}
			t.Log(err)
		})
	}
}

// TestFastPathFollowsRevision: a new revision brings a new fast path, so a residual of the
// old data never decides a call of the new; the keys the old one served are prepared for
// the new one without a call asking.
func TestFastPathFollowsRevision(t *testing.T) {
	ctx := context.Background()
	e := uncachedEngine(t)
	in := agentCall("kb:page.read@1")
	key := fastKey{ref: in.Ref, org: in.Org}
	if d, err := e.Decide(ctx, in); err != nil || !d.Allow {
		t.Fatalf("decision %+v, %v: want allowed", d, err)
	}
	settle(t, e)
	if (*e.serving.Load().fast.entries.Load())[key] == nil {
		t.Fatal("no residual once the worker is idle")
	}
	data := testData(t)
	delete(data["grants"].(map[string]any), in.Ref)
	if err := e.Load(ctx, data, "r2"); err != nil {
		t.Fatal(err)
	}
	d, err := e.Decide(ctx, in)
	if err != nil || d.Allow || d.Revision != "r2" && !strings.HasPrefix(d.Revision, "r2+p") {
		t.Fatalf("decision %+v, %v: want denied by revision r2 (grant removed)", d, err)
	}
	e.serving.Load().fast.pause.Store(0)
	settle(t, e)
	if (*e.serving.Load().fast.entries.Load())[key] == nil {
		t.Fatal("the key the previous revision served was not prepared for r2")
	}
	if d, err := e.Decide(ctx, in); err != nil || d.Allow || d.Revision != "r2" && !strings.HasPrefix(d.Revision, "r2+p") {
		t.Fatalf("decision %+v, %v: want denied by revision r2's residual", d, err)
	}
}

// TestSeedOrder: a new bundle asks for the keys of the old one, the most recently used
// first, at most the number asked.
func TestSeedOrder(t *testing.T) {
	ctx := context.Background()
	e := uncachedEngine(t)
	refs := []string{"kb:page.read@1", "kb:page.write@1", "kb:draft.read@1"}
	for _, ref := range refs {
		if _, err := e.Decide(ctx, agentCall(ref)); err != nil {
			t.Fatal(err)
		}
		settle(t, e) // each prepared before the next is used
	}
	if _, err := e.Decide(ctx, agentCall(refs[0])); err != nil { // used again: the most recent
		t.Fatal(err)
	}
	keys, _ := e.serving.Load().fast.recent(2)
	want := []fastKey{{ref: refs[0], org: "acme"}, {ref: refs[2], org: "acme"}}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("recent(2) = %v, want %v", keys, want)
	}
}

// TestFastPathOnlyForOwnPolicy: a bundle of the embedded policies (as replay reads) gets
// the fast path; one whose xema.authz Rego differs does not, since its decision need not
// be clean_decision when clean holds.
func TestFastPathOnlyForOwnPolicy(t *testing.T) {
	ctx := context.Background()
	e := uncachedEngine(t)
	tarGz, _ := e.Bundle()
	fromBundle, err := FromBundle(ctx, bytes.NewReader(tarGz))
	if err != nil {
		t.Fatal(err)
	}
	if fromBundle.serving.Load().fast == nil {
		t.Fatal("no fast path for a bundle of the embedded policies")
	}
	if !ownPolicy(e.modules) {
		t.Fatal("the engine's own modules are not its own policy")
	}
	changed := slices.Clone(e.modules)
	for i, m := range changed {
		if strings.HasSuffix(m.path, "/authz.rego") {
			changed[i].source += "\n# changed\n"
		}
	}
	if ownPolicy(changed) {
		t.Fatal("a changed authz.rego counts as the own policy")
	}
	if ownPolicy(e.modules[1:]) {
		t.Fatal("a policy missing a module counts as the own policy")
	}
}

// TestFastPathAllocs logs where an allowed call's allocations go (testing.AllocsPerRun,
// benchmark data, residual ready) and fails when the fast path stops paying: an allowed
// call must cost well under a full evaluation of decision.
func TestFastPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations differ under -race")
	}
	ctx := context.Background()
	e := syntheticEngine(t, 100)
	c := e.serving.Load()
	allow, deny := benchCalls(100)
	decide := func(in Input) func() {
		return func() {
			if _, err := e.Decide(ctx, in); err != nil {
				t.Fatal(err)
			}
		}
	}
	evaluate := func(q rego.PreparedEvalQuery, in Input) func() {
		input := inputValue(in)
		return func() {
			if _, err := c.evaluate(ctx, q, in.Ref, input); err != nil {
				t.Fatal(err)
			}
		}
	}
	prepareKeys(t, e, []decisionCase{{in: allow}, {in: deny}})
	ent := (*c.fast.entries.Load())[fastKey{ref: allow.Ref, org: allow.Org, biome: allow.Biome}]
	if ent == nil || ent.clean == nil {
		t.Fatal("no residual of clean for the allowed call")
	}
	fastAllow := testing.AllocsPerRun(100, decide(allow))
	full := testing.AllocsPerRun(100, evaluate(c.query, allow))
	t.Logf("allow: Decide %.0f (input %.0f); full evaluation %.0f",
		fastAllow, testing.AllocsPerRun(100, func() { inputValue(allow) }), full)
	t.Logf("deny: Decide %.0f (full_decision in full %.0f); full evaluation %.0f",
		testing.AllocsPerRun(100, decide(deny)), testing.AllocsPerRun(100, evaluate(c.full, deny)),
		testing.AllocsPerRun(100, evaluate(c.query, deny)))
	if fastAllow > full/2 {
		t.Errorf("an allowed call costs %.0f allocations by its residual, %.0f in full", fastAllow, full)
	}
}

// TestPreparationBesideDecisions: calls of the same keys at once, while the worker
// partially evaluates them and a new revision seeds the next, get the decision of the full
// evaluation. Meant for -race: partial evaluation runs beside evaluation with no lock.
func TestPreparationBesideDecisions(t *testing.T) {
	ctx := context.Background()
	e := uncachedEngine(t)
	c := e.serving.Load()
	cases := decisionCases()
	want := make([]Decision, len(cases))
	for i, tc := range cases {
		d, err := c.evaluate(ctx, c.full, tc.in.Ref, inputValue(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		want[i] = d
	}
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			for round := range 4 {
				for i := range cases {
					i := (i + g*7 + round) % len(cases)
					d, err := e.Decide(ctx, cases[i].in)
					if err != nil || !reflect.DeepEqual(d, want[i]) {
						t.Errorf("%s: %+v, %v; want %+v", cases[i].name, d, err, want[i])
						return
					}
				}
			}
		})
	}
	wg.Wait()
	settle(t, e)
	if c.fast.byResidual.Load() == 0 && len(*c.fast.entries.Load()) == 0 {
		t.Fatal("nothing was prepared beside the decisions")
	}
}

// TestFastPathFullResidualOnFirstDenial: a key whose calls are all clean has no residual
// of full_decision; its first call that is not clean is decided by full_decision in full
// and asks for it; once made, it decides as the full evaluation.
func TestFastPathFullResidualOnFirstDenial(t *testing.T) {
	ctx := context.Background()
	e := uncachedEngine(t)
	c := e.serving.Load()
	allowed := agentCall("kb:page.read@1")
	for range 2 {
		if d, err := e.Decide(ctx, allowed); err != nil || !d.Allow {
			t.Fatalf("decision %+v, %v: want allowed", d, err)
		}
		settle(t, e)
	}
	key := fastKey{ref: allowed.Ref, org: allowed.Org}
	ent := (*c.fast.entries.Load())[key]
	if ent == nil || ent.full.Load() != nil {
		t.Fatalf("entry %v: want one without a residual of full_decision", ent)
	}
	denied := with(allowed, func(in *Input) { in.Environment = "org" })
	want, err := c.evaluate(ctx, c.full, denied.Ref, inputValue(denied))
	if err != nil {
		t.Fatal(err)
	}
	for _, wantOut := range []outcome{notClean, decidedFull} {
		d, out, err := fastDecide(ctx, c, denied)
		if err != nil || out != wantOut || !reflect.DeepEqual(d, want) {
			t.Fatalf("decision %+v (outcome %d), %v; want %+v, outcome %d", d, out, err, want, wantOut)
		}
		settle(t, e)
	}
	if full := ent.full.Load(); full == nil || full.q == nil {
		t.Fatal("no residual of full_decision after a denied call")
	}
}

// TestFastPathFullResidualsBounded: past fullLimit residuals of full_decision, a key's
// calls that are not clean are decided by full_decision in full (the same decision), and
// the key makes none.
func TestFastPathFullResidualsBounded(t *testing.T) {
	ctx := context.Background()
	e := uncachedEngine(t)
	c := e.serving.Load()
	c.fast.fullLimit = 1
	for i, ref := range []string{"kb:page.read@1", "kb:draft.read@1"} {
		denied := with(agentCall(ref), func(in *Input) { in.Environment = "org" })
		want, err := c.evaluate(ctx, c.full, denied.Ref, inputValue(denied))
		if err != nil {
			t.Fatal(err)
		}
		for range 3 { // asks for the entry, then its residual of full_decision
			if _, _, err := fastDecide(ctx, c, denied); err != nil {
				t.Fatal(err)
			}
			settle(t, e)
		}
		wantOutcome := []outcome{decidedFull, notClean}[i]
		d, out, err := fastDecide(ctx, c, denied)
		if err != nil || out != wantOutcome || !reflect.DeepEqual(d, want) {
			t.Fatalf("%s: decision %+v (outcome %d), %v; want outcome %d deciding %+v", ref, d, out, err, wantOutcome, want)
		}
	}
	if c.fast.fullMade != 1 {
		t.Fatalf("%d residuals of full_decision made, want the limit, 1", c.fast.fullMade)
	}
}

// TestFastPathPreparationFailureDecidesInFull: a key the fast path cannot prepare is decided
// by the full evaluation, the same as without a fast path, never denied for it, and not
// prepared again.
func TestFastPathPreparationFailureDecidesInFull(t *testing.T) {
	ctx := context.Background()
	e := uncachedEngine(t)
	c := e.serving.Load()
	prepared := 0
	c.fast.queries = func() (fastQueries, error) {
		prepared++
		return fastQueries{}, errors.New("injected preparation failure")
	}
	in := agentCall("kb:page.read@1")
	for i := range 4 {
		if d, err := e.Decide(ctx, in); err != nil || !d.Allow {
			t.Fatalf("call %d: decision %+v, %v: want allowed by the full evaluation", i, d, err)
		}
		settle(t, e)
	}
	if prepared != 1 {
		t.Fatalf("prepared %d times, want once", prepared)
	}
}

// TestNoCallWaitsForPartialEvaluation: while the worker is stuck in a preparation, calls of
// the key being prepared and of others are decided (in full) and return.
func TestNoCallWaitsForPartialEvaluation(t *testing.T) {
	ctx := context.Background()
	e := uncachedEngine(t)
	c := e.serving.Load()
	inside, release := make(chan struct{}), make(chan struct{})
	queries := c.fast.queries
	var once sync.Once
	c.fast.queries = func() (fastQueries, error) {
		once.Do(func() { close(inside) })
		<-release
		return queries()
	}
	first, other := agentCall("kb:page.read@1"), agentCall("kb:page.write@1")
	if _, err := e.Decide(ctx, first); err != nil { // starts the worker on first's key
		t.Fatal(err)
	}
	<-inside
	for _, in := range []Input{first, other, first} {
		if _, err := e.Decide(ctx, in); err != nil {
			t.Fatalf("%s beside a preparation: %v", in.Ref, err)
		}
	}
	if got := c.fast.byResidual.Load(); got != 0 {
		t.Fatalf("%d calls decided by a residual while none was ready", got)
	}
	close(release)
	settle(t, e)
	if (*c.fast.entries.Load())[fastKey{ref: other.Ref, org: other.Org}] == nil {
		t.Fatal("the key asked for during the preparation was not prepared after it")
	}
}
