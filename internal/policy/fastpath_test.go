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

// fastMismatches decides every input of cases as Decide does through the fast path (the
// residual of clean, then clean_decision, the residual of full_decision or full_decision;
// decision for a key without a residual yet) and compares every field with full_decision
// evaluated in full: the policy's decision without any shortcut (no clean). So it fails
// when the engine's fast path or fast.rego's clean is wrong. fast counts the inputs the
// residuals decided, byFull those the residual of full_decision decided.
func fastMismatches(t *testing.T, e *Engine, cases []decisionCase) (mismatches []string, fast, byFull, allowed, denied int) {
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
		got, out, err := c.fast.decide(ctx, tc.in, inputValue(tc.in))
		if err != nil {
			t.Fatalf("%s: fast path: %v", tc.name, err)
		}
		switch out {
		case notClean: // Decide evaluates full_decision: want
			fast++
			continue
		case undecided:
			if got, err = c.evaluate(ctx, c.query, tc.in.Ref, inputValue(tc.in)); err != nil {
				t.Fatalf("%s: decision: %v", tc.name, err)
			}
		case decidedFull:
			byFull++
			fast++
		default:
			fast++
		}
		if !reflect.DeepEqual(got, want) {
			mismatches = append(mismatches, tc.name)
			if len(mismatches) <= 5 {
				t.Logf("%s:\n fast %+v\n full %+v", tc.name, got, want)
			}
		}
	}
	return mismatches, fast, byFull, allowed, denied
}

// eager lets e's fast path prepare a key on every second call, unspaced (prepareEvery), so
// a test over many keys has them all prepared.
func eager(e *Engine) *Engine {
	e.serving.Load().fast.every = 0
	return e
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
// full evaluation does (every field), allowed and denied, by the residuals of clean and of
// full_decision; and so for the benchmark's calls, with their mutations, over the
// benchmark's data.
func TestFastPathEquivalent(t *testing.T) {
	bench := syntheticEngine(t, 100)
	allow, deny := benchCalls(100)
	for _, run := range []struct {
		name  string
		e     *Engine
		cases []decisionCase
	}{
		{"fixture", eager(uncachedEngine(t)), corpus()},
		{"synthetic", eager(bench), mutated([]decisionCase{{name: "allow", in: allow}, {name: "deny", in: deny}})},
	} {
		t.Run(run.name, func(t *testing.T) {
			mismatches, fast, byFull, allowed, denied := fastMismatches(t, run.e, run.cases)
			if len(mismatches) > 0 {
				t.Errorf("%d inputs decided differently by the fast path", len(mismatches))
			}
			if fast == 0 || byFull == 0 || allowed == 0 || denied == 0 {
				t.Fatalf("corpus does not exercise every path: fast %d (residual of full_decision %d), allowed %d, denied %d",
					fast, byFull, allowed, denied)
			}
			t.Logf("%d inputs (%d allowed, %d denied), %d decided by the fast path, %d of them by the residual of full_decision",
				allowed+denied, allowed, denied, fast, byFull)
		})
	}
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
			if ent.program != nil || ent.residual != nil {
				ent.program, ent.residual = nil, q
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
			for _, tc := range decisionCases() {
				key := fastKey{ref: tc.in.Ref, org: tc.in.Org, biome: tc.in.Biome}
				ent, err := c.fast.prepare(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				broken.set(ent, &q)
				c.fast.entries.Put(key, ent)
			}
			mismatches, _, _, _, _ := fastMismatches(t, e, corpus())
			if len(mismatches) == 0 {
				t.Fatal("a broken fast path went unnoticed")
			}
			t.Logf("broken fast path: %d inputs decided differently", len(mismatches))
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
		{"clean", read, true, func(ent *fastEntry, q *rego.PreparedEvalQuery) { ent.program, ent.residual = nil, q }},
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
			key := fastKey{ref: run.in.Ref, org: run.in.Org, biome: run.in.Biome}
			ent, err := c.fast.prepare(ctx, key)
			if err != nil || (ent.program == nil && ent.residual == nil) {
				t.Fatalf("entry %+v, %v: want a residual", ent, err)
			}
			run.set(ent, &conflict)
			c.fast.entries.Put(key, ent)
			d, err := e.Decide(ctx, run.in)
			if err == nil || d.Allow {
				t.Fatalf("decision %+v, %v: want an error and no allow", d, err)
			}
			t.Log(err)
		})
	}
}

// TestFastPathFollowsRevision: a new revision brings a new fast path, so a residual of the
// old data never decides a call of the new.
func TestFastPathFollowsRevision(t *testing.T) {
	ctx := context.Background()
	e := uncachedEngine(t)
	in := agentCall("kb:page.read@1")
	for range 3 { // the second call prepares the residual, the third uses it
		if d, err := e.Decide(ctx, in); err != nil || !d.Allow {
			t.Fatalf("decision %+v, %v: want allowed", d, err)
		}
	}
	if _, ok := e.serving.Load().fast.entries.Get(fastKey{ref: in.Ref, org: in.Org}, nil); !ok {
		t.Fatal("no residual after three calls")
	}
	data := testData(t)
	delete(data["grants"].(map[string]any), in.Ref)
	if err := e.Load(ctx, data, "r2"); err != nil {
		t.Fatal(err)
	}
	d, err := e.Decide(ctx, in)
	if err != nil || d.Allow || d.Revision != "r2" {
		t.Fatalf("decision %+v, %v: want denied by revision r2 (grant removed)", d, err)
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
	decide(allow)()
	decide(allow)() // the second call prepares the residual
	ent, ok := c.fast.entries.Get(fastKey{ref: allow.Ref, org: allow.Org, biome: allow.Biome}, nil)
	if !ok || ent.program == nil {
		t.Fatal("no residual program for the allowed call")
	}
	input := inputValue(allow)
	fastAllow := testing.AllocsPerRun(100, decide(allow))
	full := testing.AllocsPerRun(100, evaluate(c.query, allow))
	t.Logf("allow: Decide %.0f (input %.0f, residual program %.0f); full evaluation %.0f",
		fastAllow, testing.AllocsPerRun(100, func() { inputValue(allow) }),
		testing.AllocsPerRun(100, func() {
			if _, err := ent.holds(ctx, input); err != nil {
				t.Fatal(err)
			}
		}), full)
	t.Logf("deny: Decide %.0f (full_decision %.0f); full evaluation %.0f",
		testing.AllocsPerRun(100, decide(deny)), testing.AllocsPerRun(100, evaluate(c.full, deny)),
		testing.AllocsPerRun(100, evaluate(c.query, deny)))
	if fastAllow > full/2 {
		t.Errorf("an allowed call costs %.0f allocations by the fast path, %.0f in full", fastAllow, full)
	}
}

// TestFastPathConcurrent: calls of the same keys at once (entries prepared while others
// evaluate them, the preparing lock taken and missed) get the decision of the full
// evaluation. Meant for -race too.
func TestFastPathConcurrent(t *testing.T) {
	ctx := context.Background()
	e := eager(uncachedEngine(t))
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
	for g := range 4 {
		wg.Go(func() {
			for round := range 5 {
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
}

// TestFastPathSpacesPreparations: a second key's preparation within prepareEvery of the
// first waits (its calls take the full path, decided alike).
func TestFastPathSpacesPreparations(t *testing.T) {
	ctx := context.Background()
	e := uncachedEngine(t)
	f := e.serving.Load().fast
	first, second := agentCall("kb:page.read@1"), agentCall("kb:page.write@1")
	for _, in := range []Input{first, first, second, second, second} {
		if _, err := e.Decide(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := f.entries.Get(fastKey{ref: first.Ref, org: first.Org}, nil); !ok {
		t.Fatal("the first key was not prepared")
	}
	if _, ok := f.entries.Get(fastKey{ref: second.Ref, org: second.Org}, nil); ok {
		t.Fatal("the second key was prepared within prepareEvery of the first")
	}
	f.last = time.Now().Add(-prepareEvery)
	if _, err := e.Decide(ctx, second); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.entries.Get(fastKey{ref: second.Ref, org: second.Org}, nil); !ok {
		t.Fatal("the second key was not prepared once prepareEvery had passed")
	}
}

// TestFastPathFullResidualOnFirstDenial: a key whose calls are all clean has no residual
// of full_decision; its first call that is not clean makes it, and is decided by it as by
// the full evaluation.
func TestFastPathFullResidualOnFirstDenial(t *testing.T) {
	ctx := context.Background()
	e := eager(uncachedEngine(t))
	c := e.serving.Load()
	allowed := agentCall("kb:page.read@1")
	for range 3 {
		if d, err := e.Decide(ctx, allowed); err != nil || !d.Allow {
			t.Fatalf("decision %+v, %v: want allowed", d, err)
		}
	}
	ent, ok := c.fast.entries.Get(fastKey{ref: allowed.Ref, org: allowed.Org}, nil)
	if !ok || ent.full.Load() != nil {
		t.Fatalf("entry %v (%v): want one without a residual of full_decision", ent, ok)
	}
	denied := with(allowed, func(in *Input) { in.Environment = "org" })
	want, err := c.evaluate(ctx, c.full, denied.Ref, inputValue(denied))
	if err != nil {
		t.Fatal(err)
	}
	d, out, err := c.fast.decide(ctx, denied, inputValue(denied))
	if err != nil || out != decidedFull || !reflect.DeepEqual(d, want) {
		t.Fatalf("decision %+v (outcome %d), %v; want %+v by the residual of full_decision", d, out, err, want)
	}
	if full := ent.full.Load(); full == nil || (full.program == nil && full.q == nil) {
		t.Fatal("no residual of full_decision after a denied call")
	}
}

// TestFastPathFullResidualsBounded: past fullLimit residuals of full_decision, a key's
// first call that is not clean is decided by the full evaluation (the same decision), and
// the key makes none.
func TestFastPathFullResidualsBounded(t *testing.T) {
	ctx := context.Background()
	e := eager(uncachedEngine(t))
	c := e.serving.Load()
	c.fast.fullLimit = 1
	for i, ref := range []string{"kb:page.read@1", "kb:draft.read@1"} {
		allowed := agentCall(ref)
		denied := with(allowed, func(in *Input) { in.Environment = "org" })
		for range 2 { // the second call prepares the key's residual of clean
			if _, err := e.Decide(ctx, allowed); err != nil {
				t.Fatal(err)
			}
		}
		want, err := c.evaluate(ctx, c.full, denied.Ref, inputValue(denied))
		if err != nil {
			t.Fatal(err)
		}
		wantOutcome := []outcome{decidedFull, notClean}[i]
		d, out, err := c.fast.decide(ctx, denied, inputValue(denied))
		if err != nil || out != wantOutcome || (out == decidedFull && !reflect.DeepEqual(d, want)) {
			t.Fatalf("%s: decision %+v (outcome %d), %v; want outcome %d deciding %+v", ref, d, out, err, wantOutcome, want)
		}
		if got, err := e.Decide(ctx, denied); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: Decide = %+v, %v; want %+v", ref, got, err, want)
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
	for i := range 4 { // the second call prepares the key
		if d, err := e.Decide(ctx, in); err != nil || !d.Allow {
			t.Fatalf("call %d: decision %+v, %v: want allowed by the full evaluation", i, d, err)
		}
	}
	if prepared != 1 {
		t.Fatalf("prepared %d times, want once", prepared)
	}
}

// TestPreparationNeverStallsDecisions: while a long evaluation holds evalMu shared (a
// search over a large first cut), a preparation waiting to hold it alone must not make the
// other decisions wait: a writer blocked in Lock would.
func TestPreparationNeverStallsDecisions(t *testing.T) {
	ctx := context.Background()
	e := eager(uncachedEngine(t))
	c := e.serving.Load()
	ready, fresh := agentCall("kb:page.read@1"), agentCall("kb:draft.read@1")
	for _, in := range []Input{ready, ready, fresh} { // ready is prepared, fresh seen once
		if _, err := e.Decide(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	waiting := make(chan struct{})
	var once sync.Once
	c.fast.waiting = func() { once.Do(func() { close(waiting) }) }
	evalMu.RLock()
	prepared := make(chan error, 1)
	go func() { // fresh's second call prepares it
		_, err := e.Decide(ctx, fresh)
		prepared <- err
	}()
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		evalMu.RUnlock()
		t.Fatal("the preparation never waited for evalMu")
	}
	decided := make(chan error, 1)
	go func() {
		_, err := e.Decide(ctx, ready)
		decided <- err
	}()
	select {
	case err := <-decided:
		if err != nil {
			t.Errorf("decision beside a waiting preparation: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("a decision waited behind a preparation")
	}
	evalMu.RUnlock()
	if err := <-prepared; err != nil {
		t.Fatal(err)
	}
}
