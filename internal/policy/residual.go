package policy

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// A residualProgram evaluates a residual of clean (residualModules) directly, without
// topdown: an allowed call's residual is ~20 expressions, and topdown spent ~70 µs and
// ~170 allocations on them (its per-expression machinery, not the built-ins), most of an
// uncached allowed decision (BENCHMARKS.md, issue 15, fourth step). The policy is still the
// Rego: the program is the residual partial evaluation wrote, evaluated with OPA's own
// built-in implementations (topdown.GetBuiltin) and OPA's value comparisons, for the subset
// of Rego residuals of clean use. compileResidualProgram refuses anything outside it, and
// the entry then keeps topdown's evaluation of the residual (TestResidualProgramAgrees
// checks both give the same answer over the decision corpus).
//
// The subset: complete rules whose value is true, without arguments, else or default,
// whose bodies are conjunctions of (possibly negated) expressions without `with`; an
// expression is a term, a call of an allowed built-in with its declared arity, or `a = b`;
// terms are scalars, constant composites, arrays of terms, calls, refs into input (with
// constant keys or variables as path elements) and refs naming a rule of the residual.
// Each variable occurs once in its body, so an expression holds when some assignment of its
// own variables makes it hold, independently of the others'.
type residualProgram struct {
	main  *residualRule // data.xemafast.clean_residual
	rules int           // rules compiled, each with its slot in an evaluation's memo
	ops   int           // operand slots of the calls without variables
	evals sync.Pool     // *residualEval sized for this program
}

type residualRule struct {
	slot   int
	bodies [][]residualExpr // the rule holds when one body holds
}

type residualExpr struct {
	negated bool
	holds   func(ev *residualEval) bool
}

// A term is compiled to val when it has no variable (its one value, or none: undefined),
// else to gen.
type term struct {
	val func(ev *residualEval) (*ast.Term, bool)
	gen gen
}

// gen yields each value a term takes under some assignment of its variables, until yield
// returns false; it returns false when it was stopped.
type gen func(ev *residualEval, yield func(*ast.Term) bool) bool

func (t term) each(ev *residualEval, yield func(*ast.Term) bool) bool {
	if t.val == nil {
		return t.gen(ev, yield)
	}
	if v, ok := t.val(ev); ok {
		return yield(v)
	}
	return true
}

// residualEval is one evaluation's state, pooled per program.
type residualEval struct {
	bctx  topdown.BuiltinContext
	input *ast.Term
	memo  []int8      // per rule: 0 not evaluated, 1 holds, -1 does not
	ops   []*ast.Term // the calls' operands, each call its own slots
	out   *ast.Term   // the output of the built-in just called
	iter  func(*ast.Term) error
	err   error // a built-in's Halt: the evaluation's error
}

// residualBuiltins are the built-ins a program may call: pure, deterministic functions of
// their operands with one output. A residual calling another one keeps topdown's
// evaluation.
var residualBuiltins = map[string]bool{
	"is_string": true, "is_array": true, "is_object": true, "is_set": true, "is_number": true,
	"is_boolean": true, "is_null": true, "neq": true, "equal": true, "lt": true, "lte": true,
	"gt": true, "gte": true, "internal.member_2": true, "glob.match": true, "concat": true,
	"startswith": true, "endswith": true, "count": true, "object.get": true,
}

// errUnsupported marks a residual outside the program's subset.
var errUnsupported = errors.New("outside the residual program's subset")

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUnsupported, fmt.Sprintf(format, args...))
}

// programCompiler compiles the rules of one residual.
type programCompiler struct {
	defs  map[string][]*ast.Rule // rules by path, as mods define them
	rules map[string]*residualRule
	busy  map[string]bool // rules being compiled: a recursion is refused
	ops   int             // operand slots handed out
}

// compileResidualProgram compiles the rule name of mods (residualModules); an error wrapping
// errUnsupported means the residual is outside the subset.
func compileResidualProgram(mods []*ast.Module, name string) (*residualProgram, error) {
	pc := &programCompiler{defs: map[string][]*ast.Rule{}, rules: map[string]*residualRule{}, busy: map[string]bool{}}
	for _, m := range mods {
		for _, r := range m.Rules {
			path := m.Package.Path.Extend(r.Head.Ref()).String()
			pc.defs[path] = append(pc.defs[path], r)
		}
	}
	main, err := pc.rule(residualPath.Append(ast.StringTerm(name)).String())
	if err != nil {
		return nil, err
	}
	p := &residualProgram{main: main, rules: len(pc.rules), ops: pc.ops}
	p.evals.New = func() any {
		ev := &residualEval{memo: make([]int8, p.rules), ops: make([]*ast.Term, p.ops)}
		ev.iter = func(out *ast.Term) error {
			if ev.out == nil { // one output: the allowed built-ins are functions
				ev.out = out
			}
			return nil
		}
		return ev
	}
	return p, nil
}

func (pc *programCompiler) rule(path string) (*residualRule, error) {
	if r, ok := pc.rules[path]; ok {
		return r, nil
	}
	defs := pc.defs[path]
	if len(defs) == 0 {
		return nil, unsupported("no rule %s", path)
	}
	if pc.busy[path] {
		return nil, unsupported("rule %s refers to itself", path)
	}
	pc.busy[path] = true
	defer delete(pc.busy, path)
	rule := &residualRule{}
	for _, r := range defs {
		if r.Default || r.Else != nil || len(r.Head.Args) > 0 || r.Head.Key != nil ||
			len(r.Head.Ref()) != 1 || r.Head.Value == nil || !ast.BooleanTerm(true).Equal(r.Head.Value) {
			return nil, unsupported("rule %s is not a complete rule of value true", path)
		}
		body, err := pc.body(r.Body)
		if err != nil {
			return nil, fmt.Errorf("rule %s: %w", path, err)
		}
		rule.bodies = append(rule.bodies, body)
	}
	rule.slot = len(pc.rules)
	pc.rules[path] = rule
	return rule, nil
}

func (pc *programCompiler) body(b ast.Body) ([]residualExpr, error) {
	count := map[ast.Var]int{}
	for _, x := range b {
		switch t := x.Terms.(type) {
		case *ast.Term:
			countVars(t, count)
		case []*ast.Term:
			for _, a := range t[1:] {
				countVars(a, count)
			}
		}
	}
	for v, n := range count {
		if n > 1 {
			return nil, unsupported("variable %v occurs %d times in %v", v, n, b)
		}
	}
	out := make([]residualExpr, 0, len(b))
	for _, x := range b {
		e, err := pc.expr(x)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// countVars counts the variables of t, but a ref's head (input or data; other heads are
// refused by term) and a call's operator.
func countVars(t *ast.Term, count map[ast.Var]int) {
	switch v := t.Value.(type) {
	case ast.Var:
		count[v]++
	case ast.Ref:
		if head, isVar := v[0].Value.(ast.Var); isVar && !ast.RootDocumentNames.Contains(v[0]) {
			count[head]++
		}
		for _, p := range v[1:] {
			countVars(p, count)
		}
	case ast.Call:
		for _, a := range v[1:] {
			countVars(a, count)
		}
	case *ast.Array:
		v.Foreach(func(e *ast.Term) { countVars(e, count) })
	case ast.Set:
		v.Foreach(func(e *ast.Term) { countVars(e, count) })
	case ast.Object:
		v.Foreach(func(k, e *ast.Term) { countVars(k, count); countVars(e, count) })
	}
}

// truthy holds for a defined value other than false: when an expression holds.
func truthy(v *ast.Term) bool { return !ast.Boolean(false).Equal(v.Value) }

func (pc *programCompiler) expr(x *ast.Expr) (residualExpr, error) {
	if len(x.With) > 0 {
		return residualExpr{}, unsupported("with in %v", x)
	}
	var t term
	switch ts := x.Terms.(type) {
	case *ast.Term:
		var err error
		if t, err = pc.term(ts); err != nil {
			return residualExpr{}, err
		}
	case []*ast.Term:
		op := x.Operator().String()
		if op == ast.Equality.Name && len(ts) == 3 {
			return pc.unify(x.Negated, ts[1], ts[2])
		}
		var err error
		if t, err = pc.call(op, ts[1:]); err != nil {
			return residualExpr{}, err
		}
	default:
		return residualExpr{}, unsupported("expression %v", x)
	}
	if t.val != nil {
		return residualExpr{negated: x.Negated, holds: func(ev *residualEval) bool {
			v, ok := t.val(ev)
			return ok && truthy(v)
		}}, nil
	}
	return residualExpr{negated: x.Negated, holds: func(ev *residualEval) bool { return some(ev, t, truthy) }}, nil
}

// unify compiles a = b: with a variable on one side (it occurs nowhere else), it holds
// when the other side is defined; else when some values of the two are equal, as
// topdown's unification of ground terms.
func (pc *programCompiler) unify(negated bool, a, b *ast.Term) (residualExpr, error) {
	if _, ok := b.Value.(ast.Var); ok {
		a, b = b, a
	}
	if _, ok := a.Value.(ast.Var); ok {
		t, err := pc.term(b)
		if err != nil {
			return residualExpr{}, err
		}
		return residualExpr{negated: negated, holds: func(ev *residualEval) bool {
			return some(ev, t, func(*ast.Term) bool { return true })
		}}, nil
	}
	ta, err := pc.term(a)
	if err != nil {
		return residualExpr{}, err
	}
	tb, err := pc.term(b)
	if err != nil {
		return residualExpr{}, err
	}
	if ta.val != nil && tb.val != nil {
		return residualExpr{negated: negated, holds: func(ev *residualEval) bool {
			va, ok := ta.val(ev)
			if !ok {
				return false
			}
			vb, ok := tb.val(ev)
			return ok && va.Equal(vb)
		}}, nil
	}
	return residualExpr{negated: negated, holds: func(ev *residualEval) bool {
		return some(ev, ta, func(va *ast.Term) bool {
			return some(ev, tb, func(vb *ast.Term) bool { return va.Equal(vb) })
		})
	}}, nil
}

// some reports whether t takes a value meeting ok.
func some(ev *residualEval, t term, ok func(*ast.Term) bool) bool {
	found := false
	t.each(ev, func(v *ast.Term) bool {
		found = ok(v)
		return !found && ev.err == nil
	})
	return found
}

// call compiles a call of a built-in with its declared arity (no output argument). A
// built-in's error leaves the call undefined, as topdown does when built-in errors are not
// strict; a Halt is the evaluation's error.
func (pc *programCompiler) call(op string, args []*ast.Term) (term, error) {
	bi, ok := ast.BuiltinMap[op]
	f := topdown.GetBuiltin(op)
	if !ok || f == nil || !residualBuiltins[op] {
		return term{}, unsupported("built-in %s", op)
	}
	if bi.Decl.Arity() != len(args) {
		return term{}, unsupported("%s called with %d arguments", op, len(args))
	}
	ts, err := pc.terms(args)
	if err != nil {
		return term{}, err
	}
	if !allVals(ts) {
		return term{gen: func(ev *residualEval, yield func(*ast.Term) bool) bool {
			return product(ev, ts, make([]*ast.Term, len(ts)), 0, func(operands []*ast.Term) bool {
				v, ok := ev.call(op, f, operands)
				return !ok || yield(v)
			})
		}}, nil
	}
	off := pc.ops
	pc.ops += len(ts)
	return term{val: func(ev *residualEval) (*ast.Term, bool) {
		operands := ev.ops[off : off+len(ts) : off+len(ts)]
		for i, t := range ts {
			v, ok := t.val(ev)
			if !ok {
				return nil, false
			}
			operands[i] = v
		}
		return ev.call(op, f, operands)
	}}, nil
}

// call calls a built-in, which must not keep operands.
func (ev *residualEval) call(op string, f topdown.BuiltinFunc, operands []*ast.Term) (*ast.Term, bool) {
	ev.out = nil
	err := f(ev.bctx, operands, ev.iter)
	var halt topdown.Halt
	if errors.As(err, &halt) && ev.err == nil {
		ev.err = fmt.Errorf("%s: %w", op, halt.Err)
	}
	out := ev.out
	ev.out = nil
	return out, out != nil && ev.err == nil
}

func allVals(ts []term) bool {
	for _, t := range ts {
		if t.val == nil {
			return false
		}
	}
	return true
}

func (pc *programCompiler) terms(ts []*ast.Term) ([]term, error) {
	out := make([]term, len(ts))
	for i, t := range ts {
		var err error
		if out[i], err = pc.term(t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// product calls f with each combination of the values of ts (vals as its buffer).
func product(ev *residualEval, ts []term, vals []*ast.Term, i int, f func([]*ast.Term) bool) bool {
	if i == len(ts) {
		return f(vals)
	}
	return ts[i].each(ev, func(v *ast.Term) bool {
		vals[i] = v
		return product(ev, ts, vals, i+1, f)
	})
}

func (pc *programCompiler) term(t *ast.Term) (term, error) {
	switch v := t.Value.(type) {
	case ast.Null, ast.Boolean, ast.Number, ast.String:
		return constant(t), nil
	case ast.Ref:
		return pc.ref(v)
	case ast.Call:
		return pc.call(v[0].String(), v[1:])
	case *ast.Array:
		if ast.IsConstant(v) {
			return constant(t), nil
		}
		elems := make([]*ast.Term, v.Len())
		for i := range elems {
			elems[i] = v.Elem(i)
		}
		ts, err := pc.terms(elems)
		if err != nil {
			return term{}, err
		}
		return term{gen: func(ev *residualEval, yield func(*ast.Term) bool) bool {
			return product(ev, ts, make([]*ast.Term, len(ts)), 0, func(vals []*ast.Term) bool {
				return yield(ast.ArrayTerm(append([]*ast.Term(nil), vals...)...))
			})
		}}, nil
	case ast.Object, ast.Set:
		if ast.IsConstant(v) {
			return constant(t), nil
		}
	}
	return term{}, unsupported("term %v", t)
}

func constant(t *ast.Term) term {
	return term{val: func(*residualEval) (*ast.Term, bool) { return t, true }}
}

// ref compiles a ref into input, or one naming a rule of the residual (true when it holds).
func (pc *programCompiler) ref(r ast.Ref) (term, error) {
	if r.HasPrefix(ast.DefaultRootRef) {
		rule, err := pc.rule(r.String())
		if err != nil {
			return term{}, err
		}
		return term{val: func(ev *residualEval) (*ast.Term, bool) {
			if ev.rule(rule) {
				return ast.InternedTerm(true), true
			}
			return nil, false
		}}, nil
	}
	if !r.HasPrefix(ast.InputRootRef) {
		return term{}, unsupported("ref %v", r)
	}
	path := r[1:]
	vars := false
	for _, p := range path {
		switch p.Value.(type) {
		case ast.Var:
			vars = true
		case ast.String, ast.Number, ast.Boolean, ast.Null:
		default:
			return term{}, unsupported("path element %v of %v", p, r)
		}
	}
	if !vars {
		return term{val: func(ev *residualEval) (*ast.Term, bool) { return lookup(ev.input, path) }}, nil
	}
	return term{gen: func(ev *residualEval, yield func(*ast.Term) bool) bool { return walk(ev.input, path, yield) }}, nil
}

// lookup is the value at path (no variable) below t.
func lookup(t *ast.Term, path ast.Ref) (*ast.Term, bool) {
	for _, key := range path {
		if t = child(t, key); t == nil {
			return nil, false
		}
	}
	return t, true
}

// child is t's value at key, nil when undefined.
func child(t, key *ast.Term) *ast.Term {
	switch c := t.Value.(type) {
	case ast.Object:
		return c.Get(key)
	case *ast.Array:
		if n, ok := key.Value.(ast.Number); ok {
			if i, ok := n.Int(); ok && i >= 0 && i < c.Len() {
				return c.Elem(i)
			}
		}
	case ast.Set:
		if c.Contains(key) {
			return key
		}
	}
	return nil
}

// walk yields the values at path below t, a variable standing for every key.
func walk(t *ast.Term, path ast.Ref, yield func(*ast.Term) bool) bool {
	if len(path) == 0 {
		return yield(t)
	}
	key, rest := path[0], path[1:]
	if _, isVar := key.Value.(ast.Var); !isVar {
		if next := child(t, key); next != nil {
			return walk(next, rest, yield)
		}
		return true
	}
	switch c := t.Value.(type) {
	case ast.Object:
		return !c.Until(func(_, v *ast.Term) bool { return !walk(v, rest, yield) })
	case *ast.Array:
		return !c.Until(func(v *ast.Term) bool { return !walk(v, rest, yield) })
	case ast.Set:
		return !c.Until(func(v *ast.Term) bool { return !walk(v, rest, yield) })
	}
	return true
}

// holds evaluates the program over input. Only an error of the evaluation itself (a Halt
// of a built-in, the context's end) is returned; the caller denies on it.
func (p *residualProgram) holds(ctx context.Context, input ast.Value) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	ev := p.evals.Get().(*residualEval)
	ev.bctx.Context, ev.input = ctx, ast.NewTerm(input)
	ok := ev.rule(p.main)
	err := ev.err
	clear(ev.memo)
	clear(ev.ops)
	ev.bctx.Context, ev.input, ev.err = nil, nil, nil
	p.evals.Put(ev)
	if err != nil {
		return false, err
	}
	return ok, nil
}

func (ev *residualEval) rule(r *residualRule) bool {
	switch ev.memo[r.slot] {
	case 1:
		return true
	case -1:
		return false
	}
	holds := false
	for _, body := range r.bodies {
		if holds = ev.body(body); holds || ev.err != nil {
			break
		}
	}
	ev.memo[r.slot] = -1
	if holds {
		ev.memo[r.slot] = 1
	}
	return holds
}

func (ev *residualEval) body(b []residualExpr) bool {
	for _, x := range b {
		if x.holds(ev) == x.negated || ev.err != nil {
			return false
		}
	}
	return true
}
