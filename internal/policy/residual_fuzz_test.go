package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/util"
)

// residualTarget is one residual (of clean or of full_decision) as a program and as
// topdown's prepared query of the same modules.
type residualTarget struct {
	name    string
	program *residualProgram
	q       rego.PreparedEvalQuery
	full    bool // full_decision's residual: its value is a decision object
	// calm is an ordinary input and its value by the program, for catching state one
	// evaluation leaves to the next.
	calm, calmValue *ast.Term
}

var (
	residualTargetsOnce sync.Once
	residualTargetsList []residualTarget
	residualTargetsErr  error
)

// residualTargets prepares, once per process, the distinct residuals of several keys of the
// fixture and of the widened fixture that are programs: each fuzz input is evaluated by all
// of them.
func residualTargets(tb testing.TB) []residualTarget {
	residualTargetsOnce.Do(func() { residualTargetsList, residualTargetsErr = makeResidualTargets(tb) })
	if residualTargetsErr != nil {
		tb.Fatal(residualTargetsErr)
	}
	return residualTargetsList
}

func makeResidualTargets(tb testing.TB) ([]residualTarget, error) {
	ctx := context.Background()
	calm := ast.NewTerm(inputValue(agentCall("kb:page.read@1")))
	var out []residualTarget
	seen := map[string]bool{}
	for _, data := range []map[string]any{testData(tb), widenedData(tb)} {
		e, err := New(ctx, Options{ExtraDir: "testdata/custom", DecisionCacheSize: -1})
		if err != nil {
			return nil, err
		}
		if err := e.Load(ctx, data, "r1"); err != nil {
			return nil, err
		}
		c := e.serving.Load()
		q, err := c.fast.queries()
		if err != nil {
			return nil, err
		}
		var keys []fastKey
		for _, ref := range slices.Sorted(maps.Keys(data["capabilities"].(map[string]any))) {
			keys = append(keys, fastKey{ref: ref, org: "acme"})
		}
		keys = append(keys, fastKey{ref: "kb:page.read@1"}, fastKey{ref: "biome:install@1", org: "acme", biome: "demo"},
			fastKey{ref: "kb:nope@1", org: "acme"})
		for _, key := range keys {
			for _, full := range []bool{false, true} {
				pq, name, value := q.clean, "clean_residual", ast.BooleanTerm(true)
				if full {
					pq, name, value = q.full, "full_residual", ast.VarTerm("decision")
				}
				res, err := pq.Partial(ctx, rego.EvalParsedInput(knownInput(key)))
				if err != nil {
					return nil, err
				}
				mods := residualModules(res, name, value)
				if len(res.Queries) == 0 || c.fast.refersToRules(mods) {
					continue
				}
				var text strings.Builder
				for _, m := range mods {
					text.WriteString(m.String())
				}
				if seen[text.String()] {
					continue
				}
				seen[text.String()] = true
				p, err := compileResidualProgram(mods, name)
				if err != nil {
					continue // topdown evaluates it: nothing to compare
				}
				oq, err := c.fast.compileResidual(ctx, name, mods, false)
				if err != nil {
					return nil, fmt.Errorf("%v: %w", key, err)
				}
				calmValue, err := p.eval(ctx, calm.Value)
				if err != nil {
					return nil, err
				}
				out = append(out, residualTarget{
					name: fmt.Sprintf("%s %v", name, key), program: p, q: *oq, full: full,
					calm: calm, calmValue: calmValue,
				})
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no residual program to fuzz")
	}
	return out, nil
}

// topdownResidual is the value of t's residual by topdown, nil when undefined.
func (t *residualTarget) topdown(ctx context.Context, input ast.Value) (*ast.Term, error) {
	opts, stop := evalOptions(ctx, input)
	defer stop()
	rs, err := t.q.Eval(ctx, opts...)
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	return rs[0].Expressions[0].Value.(*ast.Term), nil
}

// fuzzFields are the input fields a fuzz input may replace, nested ones by their path.
var fuzzFields = [][]string{
	{"environment"}, {"subject"}, {"subject", "kind"}, {"subject", "ref"}, {"groups"}, {"roles"},
	{"armed"}, {"resource"}, {"resourceOwner"}, {"orgRole"}, {"usage"}, {"usage", "rateExceeded"},
	{"usage", "quotaExceeded"}, {"usage", "retryAfterSeconds"}, {"approval"}, {"approval", "requester"},
	{"approval", "approvalId"}, {"bindings"}, {"instanceRelations"}, {"ref"}, {"org"}, {"biome"},
	{"project"}, {"session"},
}

// fuzzValue is the value sel picks for a field (nil: the field removed), of any JSON type.
func fuzzValue(sel byte, s1, s2 string, n int64) *ast.Term {
	num := ast.IntNumberTerm(int(n))
	switch sel % 16 {
	case 0:
		return ast.ArrayTerm(ast.NullTerm(), ast.ObjectTerm([2]*ast.Term{ast.StringTerm(""), ast.NullTerm()}))
	case 1:
		return nil
	case 2:
		return ast.StringTerm(s1)
	case 3:
		return ast.StringTerm(s2)
	case 4:
		return ast.StringTerm("")
	case 5:
		return num
	case 6:
		return ast.NumberTerm(json.Number(fmt.Sprintf("%d.0", n))) // 1.0 as well as 1
	case 7:
		if _, err := json.Number(s1).Float64(); err == nil && !strings.ContainsAny(s1, " \t\n+") {
			return ast.NumberTerm(json.Number(s1))
		}
		return ast.StringTerm(fmt.Sprint(n)) // a number as a string
	case 8:
		return ast.BooleanTerm(true)
	case 9:
		return ast.BooleanTerm(false)
	case 10:
		return ast.NullTerm()
	case 11:
		return ast.ArrayTerm(ast.StringTerm(s1))
	case 12:
		return ast.ArrayTerm(ast.StringTerm(s1), ast.StringTerm(s2), num, ast.NullTerm())
	case 13:
		return ast.ArrayTerm()
	case 14:
		return ast.ObjectTerm([2]*ast.Term{ast.StringTerm(s1), ast.BooleanTerm(true)}, [2]*ast.Term{ast.StringTerm(s2), num})
	}
	return ast.ObjectTerm()
}

// fuzzInput is doc (a JSON object, else {}) with the fields sel selects replaced.
func fuzzInput(doc, sel []byte, s1, s2 string, n int64) ast.Value {
	obj := ast.NewObject()
	var x any
	if err := util.UnmarshalJSON(doc, &x); err == nil {
		if v, err := ast.InterfaceToValue(x); err == nil {
			if o, ok := v.(ast.Object); ok {
				obj = o
			}
		}
	}
	for i, path := range fuzzFields {
		if i >= len(sel) || sel[i] == 0 {
			continue
		}
		obj = setPath(obj, path, fuzzValue(sel[i], s1, s2, n))
	}
	return obj
}

// setPath is obj with the value at path replaced (removed when v is nil), an object made
// where path goes through a value of another type.
func setPath(obj ast.Object, path []string, v *ast.Term) ast.Object {
	key := ast.StringTerm(path[0])
	out := ast.NewObject()
	obj.Foreach(func(k, e *ast.Term) {
		if !k.Equal(key) {
			out.Insert(k, e)
		}
	})
	if len(path) > 1 {
		inner := ast.NewObject()
		if e := obj.Get(key); e != nil {
			if o, ok := e.Value.(ast.Object); ok {
				inner = o
			}
		}
		v = ast.NewTerm(setPath(inner, path[1:], v))
	}
	if v != nil {
		out.Insert(key, v)
	}
	return out
}

// FuzzResidualProgram: for any input document, every residual program of the fixture's
// keys answers as topdown's evaluation of the same residual: the same value (clean's
// true or undefined, full_decision's decision object) or an error on both sides; and the
// evaluation leaves nothing to the next one.
func FuzzResidualProgram(f *testing.F) {
	for i, tc := range decisionCases() {
		v, err := ast.JSON(inputValue(tc.in))
		if err != nil {
			f.Fatal(err)
		}
		doc, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(doc, []byte(nil), "project", "support", int64(1))
		if i > 1 {
			continue
		}
		// Each field of another type: one seed per type, every field at once.
		for sel := range 16 {
			f.Add(doc, []byte(strings.Repeat(string(rune(sel+16)), len(fuzzFields))), "agent:support-bot", "", int64(0))
		}
	}
	for _, doc := range []string{
		`{}`, `null`, `[]`, `"input"`, `{"environment": null, "subject": null, "armed": null}`,
		`{"environment": "project", "subject": {"kind": "agent", "ref": "agent:support-bot"}, "armed": ["*"], "groups": ["support"], "roles": [], "usage": {"rateExceeded": "false", "quotaExceeded": 0, "retryAfterSeconds": "7"}}`,
		`{"environment": "project", "subject": {"kind": "agent", "ref": "agent:support-bot"}, "armed": {"0": "*"}, "groups": "support"}`,
		`{"environment": ["project"], "subject": ["agent", "agent:support-bot"], "armed": "*"}`,
		`{"environment": "project", "subject": {"kind": "user", "ref": "user:root"}, "orgRole": "org_admin", "armed": ["*"], "approval": {"requester": null, "approvalId": 1}}`,
		`{"environment": "project", "subject": {"kind": "agent", "ref": "agent:support-bot"}, "armed": ["*"], "approval": {}, "bindings": {"repository/writer": "true"}, "instanceRelations": []}`,
		`{"environment": "project", "subject": {"kind": "agent", "ref": "agent:support-bot", "extra": {"a": [null, [null]]}}, "armed": [null, 1, "*"], "resource": 1.0, "resourceOwner": {"ref": "agent:support-bot"}}`,
		`{"environment": "project", "subject": {"kind": "agent", "ref": "agent:support-bot"}, "armed": ["*"], "usage": {"rateExceeded": 1, "quotaExceeded": 1.0, "retryAfterSeconds": 1e400}}`,
		`{"environment": "project", "subject": {"kind": "agent", "ref": "agent:support-bot"}, "armed": [` + strings.Repeat(`"x:*", `, 2000) + `"*"], "groups": [` + strings.Repeat(`"g", `, 500) + `"support"]}`,
	} {
		f.Add([]byte(doc), []byte(nil), "project", "support", int64(1))
		f.Add([]byte(doc), []byte{0, 0, 0, 0, 11, 12, 2}, "*", "kb/pages/welcome", int64(-1))
	}
	start := time.Now()
	targets := residualTargets(f)
	f.Logf("%d residual programs, %v", len(targets), time.Since(start))
	f.Fuzz(func(t *testing.T, doc, sel []byte, s1, s2 string, n int64) {
		if len(doc) > 1<<16 {
			return // huge documents cost time, not new paths
		}
		ctx := context.Background()
		input := fuzzInput(doc, sel, s1, s2, n)
		for i := range targets {
			tg := &targets[i]
			want, wantErr := tg.topdown(ctx, input)
			got, err := tg.program.eval(ctx, input)
			switch {
			case (err != nil) != (wantErr != nil):
				t.Errorf("%s: input %v: program error %v, topdown error %v", tg.name, input, err, wantErr)
			case (got == nil) != (want == nil) || (got != nil && !got.Equal(want)):
				t.Errorf("%s: input %v: program %v, topdown %v", tg.name, input, got, want)
			case tg.full && want != nil:
				// As the fast path reads it: the same decision, or the same failure to decode.
				dw, errW := decodeDecision(want.Value)
				dg, errG := decodeDecision(got.Value)
				if (errW != nil) != (errG != nil) || fmt.Sprint(dw) != fmt.Sprint(dg) {
					t.Errorf("%s: input %v: decision by program %+v (%v), by topdown %+v (%v)", tg.name, input, dg, errG, dw, errW)
				}
			}
			// The next evaluation of the program (from its pool) answers as a first one.
			if v, err := tg.program.eval(ctx, tg.calm.Value); err != nil || (v == nil) != (tg.calmValue == nil) || (v != nil && !v.Equal(tg.calmValue)) {
				t.Errorf("%s: after input %v, the ordinary input's value is %v (%v), was %v", tg.name, input, v, err, tg.calmValue)
			}
		}
	})
}
