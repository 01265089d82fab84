package policy

import (
	"context"
	"errors"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// topdownHolds evaluates data.xemafast.clean_residual of mods with topdown, as the entry
// without a program does.
func topdownHolds(t *testing.T, mods []*ast.Module, input ast.Value) bool {
	t.Helper()
	opts := []func(*rego.Rego){rego.Query("data.xemafast.clean_residual")}
	for _, m := range mods {
		opts = append(opts, rego.ParsedModule(m))
	}
	q, err := rego.New(opts...).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ent := &fastEntry{residual: &q}
	ok, err := ent.holds(context.Background(), input)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func parseModules(t *testing.T, srcs ...string) []*ast.Module {
	t.Helper()
	var mods []*ast.Module
	for i, src := range srcs {
		m, err := ast.ParseModuleWithOpts("m"+string(rune('0'+i))+".rego", src, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatal(err)
		}
		mods = append(mods, m)
	}
	return mods
}

// TestResidualProgramMatchesTopdown: for residual-shaped modules that exercise each part
// of the subset (negation, iteration over arrays, objects and sets, undefined paths, number
// equality, a built-in's error, nested calls, support rules with several bodies), the
// program holds exactly when topdown's evaluation of the same modules does.
func TestResidualProgramMatchesTopdown(t *testing.T) {
	inputs := []string{
		`{}`,
		`{"environment": "project", "armed": ["*"], "subject": {"kind": "agent", "ref": "agent:a"}, "groups": ["support"], "n": 1}`,
		`{"environment": "", "armed": [], "subject": {"kind": "user", "ref": "user:u"}, "groups": [], "n": 1.0}`,
		`{"environment": 7, "armed": ["kb:*", "x"], "subject": {"kind": "", "ref": ""}, "groups": [1, "ops"], "n": "1"}`,
		`{"environment": "org", "armed": "*", "subject": "agent", "groups": {"a": "support"}, "n": [1], "approval": null}`,
		`{"environment": "project", "armed": ["kb:page.read@1"], "subject": {"kind": "agent", "ref": "agent:b"}, "roles": ["admin"], "approval": false, "usage": {"rateExceeded": true}}`,
		`{"environment": "project", "armed": ["d*"], "resource": "kb/1/page", "usage": {"rateExceeded": 1, "quotaExceeded": false}}`,
		`{"environment": "project", "resource": 3, "tags": ["a", "b"], "obj": {"k": {"v": true}}}`,
	}
	cases := []struct {
		name string
		mods []string
	}{
		{"well-formed input", []string{`package xemafast
clean_residual if { is_string(input.environment); input.environment != ""; is_string(input.subject.kind); input.subject.kind != "" }`}},
		{"membership and negated equality", []string{`package xemafast
clean_residual if { internal.member_2(input.environment, {"project", "org"}); not input.usage.rateExceeded = true; not input.usage.quotaExceeded == true }`}},
		{"glob over an array", []string{`package xemafast
clean_residual if { is_array(input.armed); glob.match(input.armed[_], null, "kb:page.read@1") }`}},
		{"iteration over an object's values", []string{`package xemafast
clean_residual if { input.groups[_] == "support" }`}},
		{"nested call with iteration", []string{`package xemafast
clean_residual if { internal.member_2(concat(":", ["group", input.groups[_]]), {"group:support", "group:ops"}) }`}},
		{"a built-in's error is undefined", []string{`package xemafast
clean_residual if { concat(":", input.groups) != "x" }`}},
		{"number equality", []string{`package xemafast
clean_residual if { input.n == 1 }`}},
		{"defined", []string{`package xemafast
clean_residual if { not data.xemafast.approval }
approval if { _ = input.approval }`}},
		{"support rule with several bodies", []string{`package xemafast
clean_residual if { data.xemafast.xema.authz.covered; not data.xemafast.outside }
outside if { is_string(input.resource); not data.xemafast.granted }
granted if { glob.match("kb/1/*", ["/"], input.resource) }`, `package xemafast.xema.authz
covered if { internal.member_2(input.subject.ref, {"agent:a", "group:support"}) }
covered if { internal.member_2(concat(":", ["group", input.groups[_]]), {"agent:a", "group:support"}) }
covered if { internal.member_2(concat(":", ["role", input.roles[_]]), {"role:admin"}) }`}},
		{"several bodies of the main rule", []string{`package xemafast
clean_residual if { input.environment == "org" }
clean_residual if { input.obj.k.v }
clean_residual if { input.tags[1] == "b" }`}},
		{"array index and set lookup", []string{`package xemafast
clean_residual if { input.armed[0] == "*"; not input.armed[1] }`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mods := parseModules(t, tc.mods...)
			p, err := compileResidualProgram(mods, "clean_residual")
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			held := 0
			for _, in := range inputs {
				input := ast.MustParseTerm(in).Value
				want := topdownHolds(t, mods, input)
				got, err := p.holds(context.Background(), input)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("input %s: program %v, topdown %v", in, got, want)
				}
				if want {
					held++
				}
			}
			if held == 0 || held == len(inputs) {
				t.Fatalf("held for %d of %d inputs: the case decides nothing", held, len(inputs))
			}
		})
	}
}

// TestResidualProgramRefusesOutsideSubset: what the program does not evaluate as topdown
// does is refused at compile time, and the entry keeps topdown's evaluation.
func TestResidualProgramRefusesOutsideSubset(t *testing.T) {
	for _, tc := range []struct{ name, src string }{
		{"a variable joining two expressions", `package xemafast
clean_residual if { x = input.groups[_]; x == "a" }`},
		{"a variable twice in one expression", `package xemafast
clean_residual if { input.a[i] == input.b[i] }`},
		{"with", `package xemafast
clean_residual if { input.a with input.a as true }`},
		{"a built-in outside the list", `package xemafast
clean_residual if { time.now_ns() > 0 }`},
		{"an output argument", `package xemafast
clean_residual if { concat(":", ["a", "b"], "a:b") }`},
		{"a ref into data", `package xemafast
clean_residual if { data.grants[input.ref] }`},
		{"a function", `package xemafast
clean_residual if { f(input.a) }
f(x) if { x == 1 }`},
		{"a value other than true", `package xemafast
clean_residual if { data.xemafast.v }
v := 2 if { input.a }`},
		{"a default", `package xemafast
clean_residual if { data.xemafast.d }
default d := true`},
		{"a comprehension", `package xemafast
clean_residual if { count([x | some x in input.a]) > 0 }`},
		{"a partial set", `package xemafast
clean_residual if { data.xemafast.s[_] }
s contains x if { some x in input.a }`},
		{"a ref with a ref inside", `package xemafast
clean_residual if { input.a[input.b] }`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compileResidualProgram(parseModules(t, tc.src), "clean_residual")
			if !errors.Is(err, errUnsupported) {
				t.Fatalf("compile = %v, want errUnsupported", err)
			}
		})
	}
}

// TestResidualProgramAgrees: over the decision corpus, and the corpus made the call of
// every granted capability of the fixture (each a residual of its own shape), every key's
// residual of clean is a program, which holds for exactly the inputs topdown's evaluation of
// the same residual holds for.
func TestResidualProgramAgrees(t *testing.T) {
	allow, deny := benchCalls(100)
	widened, err := New(context.Background(), Options{ExtraDir: "testdata/custom", DecisionCacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := widened.Load(context.Background(), widenedData(t), "r1"); err != nil {
		t.Fatal(err)
	}
	fixture := corpus()
	for _, ref := range []string{"kb:page.read@1", "kb:page.write@1", "kb:old.read@1", "kb:draft.read@1",
		"kb:secret.read@1", "workflow:run.start@1", "connector:scm.create-pull-request@1", "doc:page.share@1"} {
		for _, tc := range corpus() {
			fixture = append(fixture, decisionCase{name: ref + ": " + tc.name, in: with(tc.in, func(in *Input) {
				in.Ref, in.Org, in.Biome = ref, "acme", "demo"
			})})
		}
	}
	for _, run := range []struct {
		name  string
		e     *Engine
		cases []decisionCase
	}{
		{"fixture", uncachedEngine(t), fixture},
		{"fixture widened", widened, fixture},
		{"synthetic", syntheticEngine(t, 100), mutated([]decisionCase{{name: "allow", in: allow}, {name: "deny", in: deny}})},
	} {
		t.Run(run.name, func(t *testing.T) { programsAgree(t, run.e, run.cases) })
	}
}

// widenedData is the fixture with each granted capability made callable cleanly in some
// way, so their residuals of clean hold for some calls and show each condition's shape: the
// agent check, the caller constraint, a required binding, an owner's reach, the
// explicit-only baseline, a grant naming no subjects.
func widenedData(t *testing.T) map[string]any {
	data := testData(t)
	caps := data["capabilities"].(map[string]any)
	full := caps["kb:page.read@1"].(map[string]any)
	for _, c := range caps {
		c := c.(map[string]any)
		for k, v := range full {
			if _, ok := c[k]; !ok {
				c[k] = v
			}
		}
	}
	caps["doc:page.share@1"].(map[string]any)["instanceGrade"] = nil
	caps["doc:page.share@1"].(map[string]any)["reach"] = "owner"
	draft := caps["kb:draft.read@1"].(map[string]any)
	draft["lifecycle"], draft["humanBaseline"] = "published", map[string]any{"kind": "explicit-only"}
	return data
}

func programsAgree(t *testing.T, e *Engine, corpus []decisionCase) {
	ctx := context.Background()
	c := e.serving.Load()
	q, err := c.fast.queries()
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[fastKey][]decisionCase{}
	for _, tc := range corpus {
		key := fastKey{ref: tc.in.Ref, org: tc.in.Org, biome: tc.in.Biome}
		byKey[key] = append(byKey[key], tc)
	}
	programs, held, notHeld := 0, 0, 0
	for key, cases := range byKey {
		pq, err := q.clean.Partial(ctx, rego.EvalParsedInput(knownInput(key)))
		if err != nil {
			t.Fatal(err)
		}
		if len(pq.Queries) == 0 {
			continue
		}
		mods := residualModules(pq, "clean_residual", ast.BooleanTerm(true))
		p, err := compileResidualProgram(mods, "clean_residual")
		if err != nil {
			t.Errorf("%v: %v", key, err)
			continue
		}
		programs++
		oq, err := c.fast.compileResidual(ctx, "clean_residual", mods, c.fast.refersToRules(mods))
		if err != nil {
			t.Fatal(err)
		}
		ref := &fastEntry{residual: oq}
		for _, tc := range cases {
			input := inputValue(tc.in)
			want, err := ref.holds(ctx, input)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.holds(ctx, input)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s: program %v, topdown %v", tc.name, got, want)
			}
			if want {
				held++
			} else {
				notHeld++
			}
		}
	}
	if programs == 0 || held == 0 || notHeld == 0 {
		t.Fatalf("%d programs, held %d, not held %d: the corpus exercises nothing", programs, held, notHeld)
	}
	t.Logf("%d of %d keys' residuals are programs, which agree with topdown over %d inputs (%d clean)",
		programs, len(byKey), held+notHeld, held)
}

// TestResidualProgramFailsClosed: an evaluation whose context has ended is an error, not a
// clean call.
func TestResidualProgramFailsClosed(t *testing.T) {
	p, err := compileResidualProgram(parseModules(t, `package xemafast
clean_residual if { input.a }`), "clean_residual")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ent := &fastEntry{program: p}
	if ok, err := ent.holds(ctx, ast.MustParseTerm(`{"a": true}`).Value); err == nil || ok {
		t.Fatalf("holds = %v, %v: want an error", ok, err)
	}
}
