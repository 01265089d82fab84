package policy

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// topdownValue evaluates data.xemafast.clean_residual of mods with topdown: its value, nil
// when undefined.
func topdownValue(t *testing.T, mods []*ast.Module, input ast.Value) (*ast.Term, error) {
	t.Helper()
	opts := []func(*rego.Rego){rego.Query("data.xemafast.clean_residual")}
	for _, m := range mods {
		opts = append(opts, rego.ParsedModule(m))
	}
	q, err := rego.New(opts...).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	evalOpts, stop := evalOptions(context.Background(), input)
	defer stop()
	rs, err := q.Eval(context.Background(), evalOpts...)
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	return rs[0].Expressions[0].Value.(*ast.Term), nil
}

// agreeOnInputs evaluates p and topdown (mods) over inputs (JSON documents), failing the
// test on any difference of value or error, and returns the outcomes seen.
func agreeOnInputs(t *testing.T, p *residualProgram, mods []*ast.Module, inputs []string) map[string]bool {
	t.Helper()
	outcomes := map[string]bool{}
	for _, in := range inputs {
		input := ast.MustParseTerm(in).Value
		want, wantErr := topdownValue(t, mods, input)
		got, err := p.eval(context.Background(), input)
		switch {
		case (err != nil) != (wantErr != nil):
			t.Errorf("input %s: program error %v, topdown error %v", in, err, wantErr)
		case (got == nil) != (want == nil) || (got != nil && !got.Equal(want)):
			t.Errorf("input %s: program %v, topdown %v", in, got, want)
		}
		switch {
		case wantErr != nil:
			outcomes["error"] = true
		case want == nil:
			outcomes["undefined"] = true
		default:
			outcomes[want.String()] = true
		}
	}
	return outcomes
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
		{"a variable joining two expressions", []string{`package xemafast
clean_residual if { x = input.groups[_]; x == "support" }`}},
		{"an output compared", []string{`package xemafast
clean_residual if { count(input.armed, 1) }`}},
		{"a value other than true, and a default", []string{`package xemafast
clean_residual := v if { v := data.xemafast.kind }
default kind := "none"
kind := input.subject.kind if { is_string(input.subject.kind) }`}},
		{"a ref with a ref inside", []string{`package xemafast
clean_residual if { data.xemafast.rank[input.subject.kind] > 1 }
rank := {"agent": 1, "user": 2}`}},
		{"a conflict is an error", []string{`package xemafast
clean_residual := 1 if { input.environment }
clean_residual := 2 if { input.armed }`}},
		{"a field's presence (object.keys compiled as a lookup)", []string{`package xemafast
clean_residual if { internal.member_2("approval", object.keys(input)); not internal.member_2("kind", object.keys(input.subject)) }
clean_residual if { internal.member_2("usage", object.keys(input)); internal.member_2("rateExceeded", object.keys(input.usage)) }`}},
		{"the first body that holds decides a rule of one constant value", []string{`package xemafast
clean_residual := v if { v := {"covered": data.xemafast.covered, "level": data.xemafast.level} }
covered if { concat(":", ["group", input.groups[_]]) == "group:support" }
covered if { input.subject.ref == "agent:a" }
covered if { input.roles[_] == "admin" }
default level := 0
level := 2 if { input.armed[_] == "*" }
level := 2 if { input.environment == "project" }`}},
		{"the first body that holds, in order: a conflict in an earlier generating body is an error", []string{`package xemafast
clean_residual := data.xemafast.covered if { true }
covered if { input.armed[_] == "*"; data.xemafast.c }
covered if { input.environment == "project" }
c := 1 if { input.subject.kind }
c := 2 if { input.subject.ref }`}},
		{"partial sets, sort and count (the residual of full_decision)", []string{`package xemafast
clean_residual := d if { d = {"allow": data.xemafast.allow, "reasons": sort(data.xemafast.deny), "codes": data.xemafast.codes} }
default allow := false
allow if { count(sort(data.xemafast.deny), 0); "project" = input.environment }
deny contains {"code": "ENV", "detail": msg} if { not input.environment = "project"; sprintf("environment %v is not granted", [input.environment], msg) }
deny contains {"code": "NOT_ARMED", "detail": "not armed"} if { not data.xemafast.armed }
deny contains {"code": "KIND", "detail": k} if { k = input.subject.kind; k != "agent" }
deny contains {"code": "APPROVAL", "detail": "approval"} if { internal.member_2("approval", object.keys(input)) }
codes contains c if { c = data.xemafast.deny[_].code }
armed if { glob.match(input.armed[_], null, "kb:page.read@1") }`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mods := parseModules(t, tc.mods...)
			p, err := compileResidualProgram(mods, "clean_residual")
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			outcomes := agreeOnInputs(t, p, mods, inputs)
			if len(outcomes) < 2 {
				t.Fatalf("one outcome for every input, %v: the case decides nothing", outcomes)
			}
		})
	}
}

// TestResidualProgramRefusesOutsideSubset: what the program does not evaluate as topdown
// does is refused at compile time, and the entry keeps topdown's evaluation.
func TestResidualProgramRefusesOutsideSubset(t *testing.T) {
	for _, tc := range []struct{ name, src string }{
		{"a variable twice in one expression", `package xemafast
clean_residual if { input.a[i] == input.b[i] }`},
		{"with", `package xemafast
clean_residual if { input.a with input.a as true }`},
		{"a built-in outside the list", `package xemafast
clean_residual if { time.now_ns() > 0 }`},
		{"a ref into data", `package xemafast
clean_residual if { data.grants[input.ref] }`},
		{"a function", `package xemafast
clean_residual if { f(input.a) }
f(x) if { x == 1 }`},
		{"a comprehension", `package xemafast
clean_residual if { count([x | some x in input.a]) > 0 }`},
		{"some in", `package xemafast
clean_residual if { data.xemafast.s[_] }
s contains x if { some x in input.a }`},
		{"a variable read before it is bound", `package xemafast
clean_residual if { x == "a"; x = input.a }`},
		{"an object with a key that is not constant", `package xemafast
clean_residual if { {input.k: 1} == {"a": 1} }`},
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
func widenedData(t testing.TB) map[string]any {
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
	fullPrograms, allowed, denied := 0, 0, 0
	for key, cases := range byKey {
		fp, fa, fd := fullProgramsAgree(t, c, q, key, cases)
		fullPrograms, allowed, denied = fullPrograms+fp, allowed+fa, denied+fd
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
	if fullPrograms == 0 || allowed == 0 || denied == 0 {
		t.Fatalf("%d programs of full_decision, allowed %d, denied %d: the corpus exercises nothing", fullPrograms, allowed, denied)
	}
	t.Logf("%d keys' residuals of full_decision are programs, which decide %d inputs as topdown (%d allowed)",
		fullPrograms, allowed+denied, allowed)
}

// fullProgramsAgree: key's residual of full_decision, unless it refers to the policy's
// rules, is a program that decides every case as topdown's evaluation of it does.
func fullProgramsAgree(t *testing.T, c *compiled, q fastQueries, key fastKey, cases []decisionCase) (programs, allowed, denied int) {
	ctx := context.Background()
	pq, err := q.full.Partial(ctx, rego.EvalParsedInput(knownInput(key)))
	if err != nil {
		t.Fatal(err)
	}
	mods := residualModules(pq, "full_residual", ast.VarTerm("decision"))
	if len(pq.Queries) == 0 || c.fast.refersToRules(mods) {
		return 0, 0, 0
	}
	p, err := compileResidualProgram(mods, "full_residual")
	if err != nil {
		t.Errorf("%v: full_decision: %v", key, err)
		return 0, 0, 0
	}
	oq, err := c.fast.compileResidual(ctx, "full_residual", mods, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		if len(cases) > 1000 && i%4 != 0 {
			continue // a quarter of a large corpus: topdown's side costs ~250 µs an input
		}
		input := inputValue(tc.in)
		want, wantErr := (&fullResidual{q: oq}).decide(ctx, input)
		got, err := (&fullResidual{program: p}).decide(ctx, input)
		if (err != nil) != (wantErr != nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: full_decision by program %+v (%v), by topdown %+v (%v)", tc.name, got, err, want, wantErr)
		}
		if want.Allow {
			allowed++
		} else {
			denied++
		}
	}
	return 1, allowed, denied
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

// TestFullResidualProgramFailsClosed: a residual program of full_decision whose evaluation
// fails (a complete rule's conflict) makes the decision an error, never an allow.
func TestFullResidualProgramFailsClosed(t *testing.T) {
	ctx := context.Background()
	e := eager(uncachedEngine(t))
	c := e.serving.Load()
	allowed := agentCall("kb:page.read@1")
	denied := with(allowed, func(in *Input) { in.Environment = "org" })
	for _, in := range []Input{allowed, allowed, denied} { // the key's residuals made
		if _, err := e.Decide(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	ent, ok := c.fast.entries.Get(fastKey{ref: allowed.Ref, org: allowed.Org}, nil)
	if !ok || ent.full.Load() == nil || ent.full.Load().program == nil {
		t.Fatal("no residual program of full_decision")
	}
	conflict, err := compileResidualProgram(parseModules(t, `package xemafast
full_residual := {"allow": true} if { input.ref }
full_residual := {"allow": false} if { input.org }`), "full_residual")
	if err != nil {
		t.Fatal(err)
	}
	ent.full.Store(&fullResidual{program: conflict})
	d, err := e.Decide(ctx, denied)
	if err == nil || d.Allow {
		t.Fatalf("decision %+v, %v: want an error and no allow", d, err)
	}
	t.Log(err)
}

// TestOperandArraysNotKept: the built-ins whose array operands are set in one array of the
// evaluation (operandArrays) keep no part of it in their output but its elements: changing
// the array after the call leaves the output as it was.
func TestOperandArraysNotKept(t *testing.T) {
	samples := map[string][][]string{
		"sprintf": {{`"%s-%v"`, `["a", 1]`}, {`"%v"`, `[["x"]]`}, {`"%d"`, `[3]`}, {`"%v %v"`, `[{"k": "v"}, null]`}},
		"concat":  {{`","`, `["a", "b"]`}, {`""`, `["a"]`}, {`"-"`, `[]`}, {`":"`, `["a", 1]`}},
	}
	for op := range operandArrays {
		if len(samples[op]) == 0 {
			t.Errorf("%s: no sample shows its output keeps no part of an array operand", op)
		}
		for _, sample := range samples[op] {
			operands := make([]*ast.Term, len(sample))
			for i, s := range sample {
				operands[i] = ast.MustParseTerm(s)
			}
			var out *ast.Term
			err := topdown.GetBuiltin(op)(topdown.BuiltinContext{Context: context.Background()}, operands,
				func(t *ast.Term) error { out = t; return nil })
			if err != nil || out == nil {
				continue // no output: nothing kept
			}
			before := out.String()
			for _, o := range operands {
				if arr, ok := o.Value.(*ast.Array); ok {
					for i := range arr.Len() {
						arr.Set(i, ast.StringTerm("changed"))
					}
				}
			}
			if out.String() != before {
				t.Errorf("%s(%v): output %s became %s when the array changed", op, sample, before, out)
			}
		}
	}
}

// TestJoinsAsConcat: joins (joinIs) holds exactly when concat's output is the string, and
// fails where concat does (an element not a string).
func TestJoinsAsConcat(t *testing.T) {
	for _, tc := range []struct{ sep, arr, s string }{
		{`:`, `["group", "support"]`, "group:support"},
		{`:`, `["group", "support"]`, "group:suppor"},
		{`:`, `["group", "support"]`, "group:supportx"},
		{`:`, `["group", "support"]`, "groupsupport"},
		{`:`, `["group", "support"]`, "group;support"},
		{`:`, `["group:", "x"]`, "group::x"},
		{`:`, `["group:", "x"]`, "group:x"},
		{`:`, `["a", "", "b"]`, "a::b"},
		{`::`, `["a", "b"]`, "a::b"},
		{``, `["a", "b"]`, "ab"},
		{`:`, `[]`, ""},
		{`:`, `[]`, ":"},
		{`:`, `["a"]`, "a"},
		{`:`, `[""]`, ""},
		{`:`, `["a", 1]`, "a:1"},
		{`:`, `[1]`, "1"},
		{`:`, `["role", null]`, "role:null"},
	} {
		arr := ast.MustParseTerm(tc.arr)
		var want bool
		err := topdown.GetBuiltin(ast.Concat.Name)(topdown.BuiltinContext{Context: context.Background()},
			[]*ast.Term{ast.StringTerm(tc.sep), arr}, func(out *ast.Term) error {
				want = out.Equal(ast.StringTerm(tc.s))
				return nil
			})
		if err != nil {
			want = false
		}
		if got := joins(arr.Value.(*ast.Array), tc.sep, tc.s); got != want {
			t.Errorf("joins(%s, %q, %q) = %v; concat's output is it: %v (error %v)", tc.arr, tc.sep, tc.s, got, want, err)
		}
	}
}

// TestResidualProgramFields: a residual of full_decision's shape (one body binding the head's
// variable to an object) is decoded from the object's fields, the object never made
// (residualProgram.evalFields), and decides as the object's decoding does: undefined when
// the body or a field is, an evaluation's error an error, never an allow. Other shapes
// have no fields and are decoded from the value.
func TestResidualProgramFields(t *testing.T) {
	inputs := []string{
		`{}`,
		`{"environment": "project", "ref": "r", "kind": "agent", "tags": ["t"], "d": {"allow": true}}`,
		`{"environment": "org", "ref": "r", "org": "o", "kind": "user", "tags": ["t", "t"], "d": {"allow": false}}`,
		`{"environment": 3, "ref": "r", "kind": "agent", "allow": "yes", "d": {"allow": true}}`,
	}
	const support = `
default allow := false
allow if { count(sort(data.xemafast.deny), 0); "project" = input.environment }
deny contains {"code": "ENV", "detail": d} if { not "project" = input.environment; sprintf("environment %v", [input.environment], d) }
deny contains {"code": "KIND", "detail": "not an agent"} if { not input.kind = "agent" }
suggestion contains {"kind": "switch-environment", "from": input.environment, "to": "project"} if { data.xemafast.deny[_].code = "ENV" }`
	for _, tc := range []struct {
		name   string
		fields bool
		src    string
	}{
		{"the residual of full_decision", true, `package xemafast
full_residual := decision if { decision = {"allow": data.xemafast.allow, "reasons": sort(data.xemafast.deny), "suggestions": sort(data.xemafast.suggestion), "obligations": [], "revision": "r1"} }` + support},
		{"the object first", true, `package xemafast
full_residual := decision if { {"allow": data.xemafast.allow, "revision": input.ref} = decision }` + support},
		{"expressions before the object", true, `package xemafast
full_residual := decision if { is_string(input.environment); x = input.ref; decision = {"allow": data.xemafast.allow, "revision": x} }` + support},
		{"a field undefined", true, `package xemafast
full_residual := decision if { decision = {"allow": data.xemafast.allow, "revision": input.org} }` + support},
		{"a field decoded in error", true, `package xemafast
full_residual := decision if { decision = {"allow": data.xemafast.allow, "revision": input.ref, "reasons": [{"code": input.kind, "why": 1}]} }` + support},
		{"a conflict", true, `package xemafast
full_residual := decision if { decision = {"allow": data.xemafast.a} }
a := true if { input.ref }
a := false if { input.kind }`},
		{"two bodies", false, `package xemafast
full_residual := decision if { input.ref = "r"; decision = {"allow": data.xemafast.allow} }
full_residual := decision if { input.org; decision = {"allow": true} }` + support},
		{"a generating body", false, `package xemafast
full_residual := decision if { input.tags[_] = "t"; decision = {"allow": data.xemafast.allow} }` + support},
		{"the variable bound before", false, `package xemafast
full_residual := decision if { decision = input.d; decision = {"allow": data.xemafast.allow} }` + support},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := compileResidualProgram(parseModules(t, tc.src), "full_residual")
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			if (p.fields != nil) != tc.fields {
				t.Fatalf("fields %v, want %v", p.fields != nil, tc.fields)
			}
			ctx := context.Background()
			outcomes := map[string]bool{}
			for _, in := range inputs {
				input := ast.MustParseTerm(in).Value
				got, err := (&fullResidual{program: p}).decide(ctx, input)
				v, wantErr := p.eval(ctx, input)
				want := Decision{}
				switch {
				case wantErr == nil && v == nil:
					wantErr = errors.New("undefined")
				case wantErr == nil:
					want, wantErr = decodeDecision(v.Value)
				}
				if (err != nil) != (wantErr != nil) || !reflect.DeepEqual(got, want) {
					t.Errorf("input %s: decided %+v, %v; the value decodes as %+v, %v", in, got, err, want, wantErr)
				}
				outcomes[fmt.Sprint(got, err != nil)] = true
			}
			if len(outcomes) < 2 && tc.name != "a conflict" && tc.name != "a field decoded in error" {
				t.Errorf("one outcome for every input: the case decides nothing")
			}
		})
	}
}
