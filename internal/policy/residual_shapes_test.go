package policy

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestResidualProgramShapes: shapes at the edge of the program's subset. Each is refused
// (refused: errUnsupported, the entry keeps topdown), or else compiled and answering as
// topdown's evaluation of the same modules for every input, with at least two outcomes.
func TestResidualProgramShapes(t *testing.T) {
	inputs := []string{
		`{}`,
		`{"a": {"k": true}, "b": {"j": true}, "k": "j"}`,
		`{"a": {"j": true}, "b": {"j": true}, "k": "j"}`,
		`{"a": ["x", "y"], "b": ["y"], "k": 1, "n": 1, "o": {"x": 1, "y": 2}}`,
		`{"a": ["y", "x"], "b": [], "k": 1.0, "n": 1.0, "o": {"y": 2, "x": 1.0}}`,
		`{"a": {"j": false}, "b": {"j": true, "k": true}, "k": "k", "n": 2}`,
		`{"a": [{"code": "A", "detail": "j"}, {"code": "B", "detail": "k"}], "b": false, "k": "k"}`,
		`{"a": "xy", "b": null, "k": null, "n": "1", "o": []}`,
		`{"a": [[1, 2], [2, 1]], "b": ["x", "z"], "k": 0, "n": 0}`,
	}
	cases := []struct {
		name    string
		refused bool
		mods    []string
	}{
		// Rego binds no variable in a negated expression: the compiler moves the negation
		// after the expression that binds x. Taken as local to the negation, `dirty` would
		// not hold where topdown's does, and clean hold: fail-open.
		{"a negated variable bound later by iteration", true, []string{`package xemafast
clean_residual if { not data.xemafast.dirty }
dirty if { not input.a[x]; input.b[x] }`}},
		{"a negated variable bound later by unification", true, []string{`package xemafast
clean_residual if { not input.a[x]; x = input.k }`}},
		{"a wildcard in a negation", true, []string{`package xemafast
clean_residual if { not input.a[_] }`}},
		{"a negated call's output", true, []string{`package xemafast
clean_residual if { not count(input.a, n); input.b }`}},
		// OPA's compiler hoists the calls nested in a negated expression and the refs among a
		// call's operands (or in an equality's composites and path elements) out of the
		// negation: one undefined makes the body fail, where `not` alone would hold.
		// `not startswith(input.resource, "kb/secrets/")` over a call naming no resource
		// would otherwise hold: fail-open.
		{"a negated call of a missing field", false, []string{`package xemafast
clean_residual if { not startswith(input.k, "j") }`}},
		{"negations of undefined operands", false, []string{`package xemafast
clean_residual := [data.xemafast.g1, data.xemafast.g2, data.xemafast.g3, data.xemafast.g4, data.xemafast.g5, data.xemafast.g6, data.xemafast.g7, data.xemafast.g8, data.xemafast.g9, data.xemafast.g10] if { true }
r := {"j": true}
default g1 := false
g1 if { not count(input.k, 0) }
default g2 := false
g2 if { not concat("", [input.k]) == "j" }
default g3 := false
g3 if { not input.a[input.k] }
default g4 := false
g4 if { not input.k == "j" }
default g5 := false
g5 if { not [input.k] = ["j"] }
default g6 := false
g6 if { not startswith(concat(",", input.a), "x") }
default g7 := false
g7 if { not neq(object.get(input, ["k"], null), "j") }
default g8 := false
g8 if { not data.xemafast.r[input.k] }
default g9 := false
g9 if { not internal.member_2(input.k, {"j", input.n}) }
default g10 := false
g10 if { not input.a[count(input.k)] }`}},
		{"a ref into a bound variable", true, []string{`package xemafast
clean_residual if { data.xemafast.s[x]; x.code == "B" }
s contains x if { x = input.a[_] }`}},
		{"a variable bound before its negation", false, []string{`package xemafast
clean_residual if { x = input.k; not input.a[x] }
clean_residual if { input.b[x]; not input.a[x] }`}},
		{"one variable name in sibling bodies and rules", false, []string{`package xemafast
clean_residual := x if { x = input.k; input.a[x] }
clean_residual := x if { input.b[x]; x != input.k; not data.xemafast.s[x] }
s contains x if { input.a[x] }
s contains x if { x = input.k }`}},
		{"keys and values of objects and arrays", false, []string{`package xemafast
clean_residual := [k, i] if { input.a[k] == true; input.b[i] == true; k != i }
clean_residual := [k, i] if { input.a[k] == "y"; input.b[i] == "y" }`}},
		{"a set of objects, then a path into them", false, []string{`package xemafast
clean_residual := "B" if { data.xemafast.s[_].code == "B" }
clean_residual := "A" if { data.xemafast.s[{"code": "A", "detail": input.k}] }
s contains {"code": c, "detail": d} if { c = input.a[i].code; d = input.a[i].detail }`}},
		{"object.get with array paths", false, []string{`package xemafast
clean_residual := [object.get(input, ["a", 0], "none"), object.get(input, ["o", "x"], "none"), object.get(input, [], "none") == input, object.get(input, ["a", "j"], "none")] if { true }`}},
		{"a rule read twice, in and out of a negation", false, []string{`package xemafast
clean_residual if { data.xemafast.c > 0; not data.xemafast.c == 2; data.xemafast.d; count(data.xemafast.s) == count(data.xemafast.s) }
c := count(input.a) if { true }
d if { data.xemafast.c < 3; data.xemafast.s[_] }
s contains x if { x = input.a[_] }`}},
		{"an empty partial set is truthy", false, []string{`package xemafast
clean_residual := {"count": count(data.xemafast.s), "truthy": data.xemafast.t, "negated": data.xemafast.f} if { data.xemafast.s }
s contains x if { x = input.b[_]; x != true }
default t := false
t if { data.xemafast.s }
default f := false
f if { not data.xemafast.s }`}},
		{"sets and objects in another order", false, []string{`package xemafast
clean_residual := [data.xemafast.e1, data.xemafast.e2, data.xemafast.e3, data.xemafast.e4] if { true }
s contains x if { x = input.a[_] }
default e1 := false
e1 if { data.xemafast.s == {"y", "x"} }
default e2 := false
e2 if { input.o == {"x": 1, "y": 2} }
default e3 := false
e3 if { object.keys(input.o) = {"y", "x"} }
default e4 := false
e4 if { sort(data.xemafast.s) = ["x", "y"] }`}},
		{"numbers of other forms", false, []string{`package xemafast
clean_residual := [data.xemafast.n1, data.xemafast.n2, data.xemafast.n3, data.xemafast.n4, data.xemafast.n5] if { true }
ones := {1: "one", "1": "string one"}
default n1 := false
n1 if { input.n = 1 }
default n2 := false
n2 if { input.n == 1.0 }
default n3 := false
n3 if { input.a[input.n] }
default n4 := "none"
n4 := data.xemafast.ones[input.n] if { true }
default n5 := false
n5 if { input.n = input.k }`}},
		{"a built-in's error is undefined, also negated", false, []string{`package xemafast
clean_residual := [data.xemafast.b1, data.xemafast.b2, data.xemafast.b3] if { true }
default b1 := false
b1 if { count(input.k) >= 0 }
default b2 := false
b2 if { not startswith(input.k, "j") }
default b3 := false
b3 if { sprintf("%d", [input.k]) }`}},
		{"a conflict over an iteration", false, []string{`package xemafast
clean_residual := x if { x = input.b[_] }`}},
		{"an undefined head value and a default", false, []string{`package xemafast
default clean_residual := "d"
clean_residual := input.k if { input.a }`}},
		{"an undefined element of a partial set", false, []string{`package xemafast
clean_residual := data.xemafast.s if { true }
s contains input.k if { true }
s contains input.n if { input.a }`}},
		{":= and =", false, []string{`package xemafast
clean_residual if { x := input.k; x == "j" }
clean_residual if { y = input.k; "k" = y }`}},
		{"undefined, false and null", false, []string{`package xemafast
clean_residual := [data.xemafast.v, data.xemafast.w] if { true }
default v := "undefined"
v := "false" if { input.b == false }
v := "null" if { input.b == null }
default w := false
w if { not input.b }`}},
		{"only false is falsy (null, 0, \"\", [] and {} hold)", false, []string{`package xemafast
clean_residual := [data.xemafast.t1, data.xemafast.t2, data.xemafast.t3, data.xemafast.t4] if { true }
default t1 := false
t1 if { input.b }
default t2 := false
t2 if { not input.b }
default t3 := false
t3 if { input.k }
default t4 := false
t4 if { input.o }`}},
		// An equality pins a ref for the rest of its body (residual.go, pin), and terms of it
		// or of variables bound to constants are made once: not a number (1 == 1.0, but sprintf
		// tells them apart), not through a negation, not a longer ref, not into a sibling
		// body; a constant call that errs stays undefined.
		{"equalities pinning refs, constants folded", false, []string{`package xemafast
clean_residual := [data.xemafast.p1, data.xemafast.p2, data.xemafast.p3, data.xemafast.p4, data.xemafast.p5, data.xemafast.p6, data.xemafast.p7, data.xemafast.p8] if { true }
default p1 := "none"
p1 := {"d": d, "k": input.k} if { "j" = input.k; sprintf("%v is %s", [input.k, input.k], d) }
default p2 := "none"
p2 := sprintf("%s", [input.n]) if { input.n == 1 }
default p3 := "none"
p3 := input.k if { not input.k = "j" }
default p4 := "none"
p4 := [x, input.k.x] if { input.k == "k"; x = concat("/", [input.k, "x"]) }
default p5 := "none"
p5 := [input.b, input.k, concat(":", ["a", x])] if { input.b = false; null = input.k; x = "b" }
p6 contains input.k if { input.k = "j" }
p6 contains input.k if { input.n = 1 }
default p7 := "none"
p7 := concat(":", ["a", input.b]) if { input.b = false }
default p8 := "none"
p8 := y if { x = "j"; input.k = x; y = concat("", [x, input.k]) }`}},
		// An array operand of sprintf or concat is set in one array of the evaluation
		// (operandArrays): the values one site makes must outlive the next.
		{"arrays of sprintf and concat, one site many values", false, []string{`package xemafast
clean_residual := [data.xemafast.s, data.xemafast.c, data.xemafast.o, data.xemafast.n] if { true }
s contains x if { v = input.a[i]; x = sprintf("%v/%v", [v, i]) }
c contains x if { x = concat(":", [input.k, input.a[_]]) }
default o := "none"
o := [concat("", [input.k]), concat("-", [input.k, input.k]), sprintf("%v", [[input.k]])] if { true }
default n := "none"
n := sprintf("%v %v", [input.n, concat(",", [input.k, concat("", [input.k])])]) if { true }`}},
		// concat(sep, [...], s) is compiled as whether the parts joined are s (joinIs).
		{"concat compared with a string", false, []string{`package xemafast
clean_residual := [data.xemafast.j1, data.xemafast.j2, data.xemafast.j3, data.xemafast.j4] if { true }
default j1 := false
j1 if { concat(":", ["x", input.a[_]], "x:y") }
default j2 := false
j2 if { concat("", [input.k, input.k], "jj") }
default j3 := false
j3 if { not concat(":", [input.k], "k") }
default j4 := "none"
j4 := x if { input.a[x]; concat("/", ["a", x, input.k], "a/j/j") }`}},
		{"refs whose path elements are refs", false, []string{`package xemafast
clean_residual := 1 if { input.a[input.k] }
clean_residual := 2 if { input.a[input.b[input.k]] }
clean_residual := 3 if { input.o[input.a[input.n]] }`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mods := parseModules(t, tc.mods...)
			p, err := compileResidualProgram(mods, "clean_residual")
			switch {
			case err != nil && !errors.Is(err, errUnsupported):
				t.Fatalf("compile: %v", err)
			case err != nil && !tc.refused:
				t.Fatalf("compile: %v", err)
			case err == nil && tc.refused:
				t.Errorf("compiled, want errUnsupported")
			}
			if err != nil {
				return
			}
			outcomes := agreeOnInputs(t, p, mods, inputs)
			if !tc.refused && len(outcomes) < 2 {
				t.Fatalf("one outcome for every input, %v: the case decides nothing", outcomes)
			}
		})
	}
}

// TestResidualProgramConcurrent: programs are shared by the calls of their key; evaluated
// from several goroutines at once (run with -race) each answers as it does alone.
func TestResidualProgramConcurrent(t *testing.T) {
	ctx := context.Background()
	targets := residualTargets(t)
	var inputs []ast.Value
	for _, tc := range decisionCases() {
		inputs = append(inputs, inputValue(tc.in))
	}
	want := make([][]*ast.Term, len(targets))
	// A program of fields (a full residual) decides by evalFields, the object not made: its
	// decisions, decoded from the pooled operand slots, are the value's.
	wantDecision := make([][]Decision, len(targets))
	fields := 0
	for i := range targets {
		for _, in := range inputs {
			v, err := targets[i].program.eval(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			want[i] = append(want[i], v)
			if targets[i].program.fields == nil || v == nil {
				wantDecision[i] = append(wantDecision[i], Decision{})
				continue
			}
			d, err := decodeDecision(v.Value)
			if err != nil {
				t.Fatal(err)
			}
			wantDecision[i] = append(wantDecision[i], d)
			fields++
		}
	}
	if fields == 0 {
		t.Fatal("no target is a program of fields: evalFields is not exercised")
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for n := range len(targets) * len(inputs) {
				k := (n*7 + g*13) % (len(targets) * len(inputs)) // each goroutine in its own order
				i, j := k/len(inputs), k%len(inputs)
				v, err := targets[i].program.eval(ctx, inputs[j])
				if err != nil || (v == nil) != (want[i][j] == nil) || (v != nil && !v.Equal(want[i][j])) {
					t.Errorf("%s, input %d: %v (%v), alone %v", targets[i].name, j, v, err, want[i][j])
				}
				if targets[i].program.fields == nil || want[i][j] == nil {
					continue
				}
				d, err := (&fullResidual{program: targets[i].program}).decide(ctx, inputs[j])
				if err != nil || !reflect.DeepEqual(d, wantDecision[i][j]) {
					t.Errorf("%s, input %d: decided %+v (%v), alone %+v", targets[i].name, j, d, err, wantDecision[i][j])
				}
			}
		})
	}
	wg.Wait()
}
