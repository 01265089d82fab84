package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// A residualProgram evaluates a residual (residualModules) directly, without topdown: an
// allowed call's residual of clean is ~20 expressions, a denied call's of full_decision
// ~40 small rules, and topdown spent 70-90 µs and ~170 allocations on the first, ~200 µs on
// the second, in its per-expression machinery rather than in the built-ins (BENCHMARKS.md,
// issue 15, fourth step). The policy is still the Rego: a program is the residual partial
// evaluation wrote, evaluated with OPA's own built-in implementations (topdown.GetBuiltin)
// and OPA's value comparisons, for the subset of Rego those residuals use.
// compileResidualProgram refuses anything outside it, and the entry then keeps topdown's
// evaluation (TestResidualProgramAgrees checks both answer the same over the decision
// corpus).
//
// The subset: complete rules (with a default or not) and partial sets, without arguments or
// else, whose bodies are conjunctions of (possibly negated) expressions without `with`. An
// expression is a term, a call of an allowed built-in (its output captured or compared, or
// its value tested), or a unification `a = b` where one side is a variable not yet bound, or
// neither side binds a variable. Terms are scalars, composites (constant keys), calls, refs
// into input or naming a rule of the residual, with constant keys or variables as path
// elements. Variables are bound in body order (the first occurrence binds: a ref's path
// element, a unification's variable side, a call's output) and may occur once unbound in
// an expression; a variable read before it is bound, or not bound before a negation, is
// refused. A negated expression fails, rather than holds, when a call nested in it or a
// ref among a call's operands is undefined, as OPA's compiler hoists those out of it
// (negationGuards).
type residualProgram struct {
	main *progRule // data.xemafast.<name>
	// fields is main as the fields of the object it binds, when it is of that shape
	// (programCompiler.fields): the object need not be made to be decoded.
	fields *progFields
	rules  int   // rules compiled, each with its slot in an evaluation's memo
	bodies int   // bodies compiled, each with its frame's slot in an evaluation
	frames int   // the variables of every body: an evaluation's stack of frames
	ops    int   // the operand slots of the calls and composites
	calls  int   // the memo slots of the calls without variables
	sites  int   // the generator sites, each with its state in an evaluation
	arrays []int // the lengths of the operand arrays (programCompiler.operands)
	// An evaluation's continuations, made once per pooled evaluation rather than as
	// closures on every call (they were most of a denied call's allocations): fns and kvs
	// by the sites that use them, conts per generating expression of a body (its rest).
	fns   []func(ev *progEval) func(*ast.Term) bool
	kvs   []func(ev *progEval) func(k, v *ast.Term) bool
	conts []func(ev *progEval) func() bool
	evals sync.Pool // *progEval sized for this program
}

// progFields is a rule `name = v if { ...; v = {k: t, ...} }` of one body: the body
// without its last expression, and the object's constant keys and values (ops from off).
type progFields struct {
	body progBody
	keys []*ast.Term
	vals []progTerm
	off  int
}

type progRule struct {
	path    string
	slot    int
	partial bool      // a partial set (contains), else a complete rule
	def     *ast.Term // a complete rule's default value, nil when it has none
	bodies  []progBody
	// once: a complete rule whose bodies all have one constant value, so the first body
	// that holds decides it (topdown's early exit). Bodies are tried in their order, as
	// topdown's: one tried first out of order could skip an earlier body's error (a
	// conflict of a rule it reads), an allow where topdown denies.
	once bool
}

type progBody struct {
	rule     *progRule
	index    int  // its slot in an evaluation's frames
	vars     int  // its frame's size
	straight bool // no expression has more than one solution: the body has at most one
	exprs    []progExpr
	value    progTerm // the head's value, or the partial set's element, once the body holds
}

// progExpr is an expression: test when it binds no variable (whether it holds), bind when
// it binds variables to one value each (whether it holds, the values set in the frame), else
// solve (yield once per solution, its variables set in the frame; false when stopped).
type progExpr struct {
	negated bool
	test    func(ev *progEval, fr []*ast.Term) bool
	bind    func(ev *progEval, fr []*ast.Term) bool
	solve   func(ev *progEval, fr []*ast.Term, yield func() bool) bool
	cont    int // solve's yield: the evaluation's continuation of the body after it
}

// progTerm is a term: val when it binds no variable (its one value, or none: undefined),
// else gen (each value, the variables it binds set in the frame, until yield returns false;
// false when stopped).
type progTerm struct {
	val  func(ev *progEval, fr []*ast.Term) (*ast.Term, bool)
	gen  func(ev *progEval, fr []*ast.Term, yield func(*ast.Term) bool) bool
	next int // as an operand of a product (a generator): its values' continuation in ev.fns
	// konst is the term's value when it is the same in every evaluation (a constant, or
	// made of constants only): a composite or call of such terms is made once, compiling.
	konst *ast.Term
}

func (t progTerm) each(ev *progEval, fr []*ast.Term, yield func(*ast.Term) bool) bool {
	if t.gen != nil {
		return t.gen(ev, fr, yield)
	}
	if v, ok := t.val(ev, fr); ok {
		return yield(v)
	}
	return true
}

// progEval is one evaluation's state, pooled per program. A rule is evaluated at most once
// an evaluation and never within itself (recursion is refused), so each rule, body and
// generator site has one slot of state, in use by one evaluation of it at a time.
type progEval struct {
	bctx  topdown.BuiltinContext
	input *ast.Term
	memo  []*ast.Term // per rule: its value once evaluated (undefinedTerm when undefined)
	accs  []ruleAcc   // per rule: what its bodies produced so far
	stack []*ast.Term // the frames of the bodies being evaluated
	top   int
	frs   [][]*ast.Term // per body: its frame while it is evaluated
	sites []site        // per generator site: its frame and consumer while it yields
	ops   []*ast.Term   // the operands of each call and composite, each its own
	calls []*ast.Term   // per call without variables: its output once made (undefinedTerm when none)
	arrs  []*ast.Term   // per operand array: the array its values are set in
	fns   []func(*ast.Term) bool
	kvs   []func(k, v *ast.Term) bool
	conts []func() bool
	out   *ast.Term // the output of the built-in just called
	iter  func(*ast.Term) error
	err   error // a conflict of a complete rule or a built-in's Halt: the evaluation's error
}

// ruleAcc is a rule's value being made: a complete rule's value, a partial set's elements.
type ruleAcc struct {
	value *ast.Term
	set   ast.Set // made on the first element
}

// site is a generator's state while it yields: the frame it reads and binds, and where its
// values go (yield for a term's values, cont for an expression's solutions).
type site struct {
	fr    []*ast.Term
	yield func(*ast.Term) bool
	cont  func() bool
	a     *ast.Term // a value held across an inner generator (match)
}

// emptySet is every partial set's value when it has no element: values are never changed
// once made.
var emptySet = ast.SetTerm()

// undefinedTerm marks a rule evaluated to no value in a memo (by its address: no rule's
// value is this term).
var undefinedTerm = &ast.Term{Value: ast.Null{}}

// residualBuiltins are the built-ins a program may call: pure, deterministic functions of
// their operands with one output. A residual calling another one keeps topdown's
// evaluation.
var residualBuiltins = map[string]bool{
	"is_string": true, "is_array": true, "is_object": true, "is_set": true, "is_number": true,
	"is_boolean": true, "is_null": true, "neq": true, "equal": true, "lt": true, "lte": true,
	"gt": true, "gte": true, "internal.member_2": true, "glob.match": true, "concat": true,
	"startswith": true, "endswith": true, "count": true, "object.get": true, "object.keys": true,
	"sort": true, "sprintf": true,
}

// errUnsupported marks a residual outside the program's subset.
var errUnsupported = errors.New("outside the residual program's subset")

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUnsupported, fmt.Sprintf(format, args...))
}

// programCompiler compiles the rules of one residual.
type programCompiler struct {
	defs   map[string][]*ast.Rule // rules by path, as mods define them
	rules  map[string]*progRule
	busy   map[string]bool // rules being compiled: a recursion is refused
	frames int
	ops    int
	calls  map[string]int // the memo slot of each call without variables, by its text
	arrays []int
	sites  int
	fns    []func(ev *progEval) func(*ast.Term) bool
	kvs    []func(ev *progEval) func(k, v *ast.Term) bool
}

// slots allocates n operand slots of an evaluation (ev.ops) and returns the first.
func (pc *programCompiler) slots(n int) int {
	pc.ops += n
	return pc.ops - n
}

// site allocates a generator site's state.
func (pc *programCompiler) site() int {
	pc.sites++
	return pc.sites - 1
}

// fn registers a continuation made once per evaluation; its index into ev.fns.
func (pc *programCompiler) fn(build func(ev *progEval) func(*ast.Term) bool) int {
	pc.fns = append(pc.fns, build)
	return len(pc.fns) - 1
}

// bodyScope is what is known of a body's variables while its expressions are compiled in
// order.
type bodyScope struct {
	slots map[ast.Var]int
	bound map[ast.Var]bool
	// known are the values that terms are known to have in the rest of the body, by the
	// terms' text: a variable bound to a constant, a ref an equality pinned (pin).
	known map[string]*ast.Term
}

func (s *bodyScope) slot(v ast.Var) int {
	i, ok := s.slots[v]
	if !ok {
		i = len(s.slots)
		s.slots[v] = i
	}
	return i
}

// compileResidualProgram compiles the rule name of mods (residualModules); an error wrapping
// errUnsupported means the residual is outside the subset.
func compileResidualProgram(mods []*ast.Module, name string) (*residualProgram, error) {
	pc := &programCompiler{defs: map[string][]*ast.Rule{}, rules: map[string]*progRule{}, busy: map[string]bool{},
		calls: map[string]int{}}
	for _, m := range mods {
		for _, r := range m.Rules {
			path := m.Package.Path.Extend(r.Head.Ref()).String()
			pc.defs[path] = append(pc.defs[path], r)
		}
	}
	path := residualPath.Append(ast.StringTerm(name)).String()
	main, err := pc.rule(path)
	if err != nil {
		return nil, err
	}
	fields, err := pc.fields(path)
	if err != nil {
		return nil, err
	}
	p := &residualProgram{main: main, fields: fields, rules: len(pc.rules), frames: pc.frames, ops: pc.ops, calls: len(pc.calls),
		sites: pc.sites, arrays: pc.arrays, fns: pc.fns, kvs: pc.kvs}
	for _, r := range pc.rules { // the bodies are in place: number them, make their continuations
		for j := range r.bodies {
			b := &r.bodies[j]
			b.rule, b.index = r, p.bodies
			p.bodies++
			for i := range b.exprs {
				if b.exprs[i].solve == nil {
					continue
				}
				b.exprs[i].cont = len(p.conts)
				next := i + 1
				p.conts = append(p.conts, func(ev *progEval) func() bool {
					return func() bool { return ev.err == nil && ev.solve(b, ev.frs[b.index], next) }
				})
			}
		}
	}
	p.evals.New = p.newEval
	return p, nil
}

// newEval makes an evaluation's state for p, its continuations once.
func (p *residualProgram) newEval() any {
	ev := &progEval{memo: make([]*ast.Term, p.rules), accs: make([]ruleAcc, p.rules),
		stack: make([]*ast.Term, p.frames), frs: make([][]*ast.Term, p.bodies), sites: make([]site, p.sites),
		ops: make([]*ast.Term, p.ops), calls: make([]*ast.Term, p.calls), arrs: make([]*ast.Term, len(p.arrays)),
		fns: make([]func(*ast.Term) bool, len(p.fns)), kvs: make([]func(k, v *ast.Term) bool, len(p.kvs)),
		conts: make([]func() bool, len(p.conts))}
	for i, n := range p.arrays {
		ev.arrs[i] = ast.ArrayTerm(slices.Repeat([]*ast.Term{ast.InternedNullTerm}, n)...)
	}
	for i, f := range p.fns {
		ev.fns[i] = f(ev)
	}
	for i, f := range p.kvs {
		ev.kvs[i] = f(ev)
	}
	for i, f := range p.conts {
		ev.conts[i] = f(ev)
	}
	ev.iter = ev.first
	return ev
}

// first keeps a built-in's output (one: the allowed built-ins are functions).
func (ev *progEval) first(out *ast.Term) error {
	if ev.out == nil {
		ev.out = out
	}
	return nil
}

func (pc *programCompiler) rule(path string) (*progRule, error) {
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
	rule := &progRule{path: path}
	for i, r := range defs {
		h := r.Head
		if r.Else != nil || len(h.Args) > 0 || len(h.Ref()) != 1 {
			return nil, unsupported("rule %s has arguments, else or a ref head", path)
		}
		partial := h.Value == nil && h.Key != nil
		if !partial && (h.Value == nil || h.Key != nil) {
			return nil, unsupported("rule %s is neither a complete rule nor a partial set", path)
		}
		if i > 0 && partial != rule.partial {
			return nil, unsupported("rule %s is defined both ways", path)
		}
		rule.partial = partial
		if r.Default {
			if !ast.IsConstant(h.Value.Value) || rule.def != nil {
				return nil, unsupported("default of %s", path)
			}
			rule.def = h.Value
			continue
		}
		value := h.Value
		if partial {
			value = h.Key
		}
		body, err := pc.body(r.Body, value)
		if err != nil {
			return nil, fmt.Errorf("rule %s: %w", path, err)
		}
		rule.bodies = append(rule.bodies, body)
	}
	rule.once = !rule.partial && oneConstant(defs)
	rule.slot = len(pc.rules)
	pc.rules[path] = rule
	return rule, nil
}

// fields compiles the rule path as progFields when it is one body whose last expression
// binds the head's variable, found nowhere else, to an object of constant keys (the residual
// of full_decision: `decision = {"allow": ..., "reasons": ...}`) and whose other expressions
// have one solution at most; nil for any other rule.
func (pc *programCompiler) fields(path string) (*progFields, error) {
	defs := pc.defs[path]
	if len(defs) != 1 || defs[0].Default || defs[0].Head.Value == nil || len(defs[0].Body) == 0 {
		return nil, nil
	}
	head, isVar := defs[0].Head.Value.Value.(ast.Var)
	body := defs[0].Body
	last := body[len(body)-1]
	if !isVar || last.Negated || len(last.With) > 0 || !last.IsEquality() {
		return nil, nil
	}
	v, o := last.Operand(0), last.Operand(1)
	if !v.Equal(ast.NewTerm(head)) {
		v, o = o, v
	}
	obj, isObject := o.Value.(ast.Object)
	if !v.Equal(ast.NewTerm(head)) || !isObject || occurs(head, body[:len(body)-1]) || occurs(head, o) {
		return nil, nil
	}
	s := &bodyScope{slots: map[ast.Var]int{}, bound: map[ast.Var]bool{}, known: map[string]*ast.Term{}}
	f := &progFields{body: progBody{exprs: make([]progExpr, 0, len(body)-1), straight: true}}
	for _, x := range body[:len(body)-1] {
		e, err := pc.expr(s, x)
		if err != nil {
			return nil, err
		}
		if e.solve != nil {
			return nil, nil
		}
		f.body.exprs = append(f.body.exprs, e)
	}
	var err error
	obj.Foreach(func(k, t *ast.Term) {
		var val progTerm
		if err == nil && ast.IsConstant(k.Value) {
			val, err = pc.term(s, t)
			f.keys, f.vals = append(f.keys, k), append(f.vals, val)
		}
	})
	if err != nil || len(f.keys) != obj.Len() || !allVals(f.vals) {
		return nil, err
	}
	f.off, f.body.vars = pc.slots(len(f.vals)), len(s.slots)
	pc.frames += f.body.vars
	return f, nil
}

// occurs reports whether the variable v occurs in x.
func occurs(v ast.Var, x any) bool {
	found := false
	ast.WalkVars(x, func(w ast.Var) bool {
		found = found || w == v
		return found
	})
	return found
}

// oneConstant reports whether the rules defs (not defaults) have one constant head value.
func oneConstant(defs []*ast.Rule) bool {
	var value *ast.Term
	for _, r := range defs {
		switch {
		case r.Default:
		case r.Head.Value == nil || !ast.IsConstant(r.Head.Value.Value):
			return false
		case value == nil:
			value = r.Head.Value
		case !value.Equal(r.Head.Value):
			return false
		}
	}
	return true
}

func (pc *programCompiler) body(b ast.Body, value *ast.Term) (progBody, error) {
	s := &bodyScope{slots: map[ast.Var]int{}, bound: map[ast.Var]bool{}, known: map[string]*ast.Term{}}
	out := progBody{exprs: make([]progExpr, 0, len(b)), straight: true}
	for _, x := range b {
		e, err := pc.expr(s, x)
		if err != nil {
			return progBody{}, err
		}
		out.exprs = append(out.exprs, e)
		out.straight = out.straight && e.solve == nil
	}
	v, err := pc.term(s, value)
	if err != nil {
		return progBody{}, err
	}
	if v.val == nil {
		return progBody{}, unsupported("head value %v binds a variable", value)
	}
	out.value, out.vars = v, len(s.slots)
	pc.frames += out.vars
	return out, nil
}

// unbound counts the occurrences of t's variables s has not bound, but a ref's head (input
// or data) and a call's operator.
func unbound(s *bodyScope, t *ast.Term, count map[ast.Var]int) {
	switch v := t.Value.(type) {
	case ast.Var:
		if !s.bound[v] {
			count[v]++
		}
	case ast.Ref:
		if head, isVar := v[0].Value.(ast.Var); isVar && !ast.RootDocumentNames.Contains(v[0]) && !s.bound[head] {
			count[head]++
		}
		for _, p := range v[1:] {
			unbound(s, p, count)
		}
	case ast.Call:
		for _, a := range v[1:] {
			unbound(s, a, count)
		}
	case *ast.Array:
		v.Foreach(func(e *ast.Term) { unbound(s, e, count) })
	case ast.Set:
		v.Foreach(func(e *ast.Term) { unbound(s, e, count) })
	case ast.Object:
		v.Foreach(func(k, e *ast.Term) { unbound(s, k, count); unbound(s, e, count) })
	}
}

// truthy holds for a defined value other than false: when an expression holds.
func truthy(v *ast.Term) bool { return !ast.Boolean(false).Equal(v.Value) }

// pin records what the expression x, which holds when the rest of the body is evaluated,
// tells of a ref: `"app" = input.environment` (partial evaluation writes one per
// alternative of a lookup in the data) makes input.environment "app" from there on, so the
// terms built of it (a reason's detail, the reason) are constants, made once. Only a
// string, boolean or null pins: equal to one of those is being it (1 == 1.0, but sprintf
// tells them apart). The ref's path must be constant keys, so its text names one value.
func (s *bodyScope) pin(x *ast.Expr) {
	op := x.Operator()
	if len(x.With) > 0 || op == nil || len(x.Operands()) != 2 ||
		(!op.Equal(ast.Equality.Ref()) && !op.Equal(ast.Equal.Ref())) {
		return
	}
	a, b := x.Operand(0), x.Operand(1)
	if _, isRef := a.Value.(ast.Ref); !isRef {
		a, b = b, a
	}
	r, isRef := a.Value.(ast.Ref)
	switch b.Value.(type) {
	case ast.String, ast.Boolean, ast.Null:
	default:
		return
	}
	if !isRef || (!r.HasPrefix(ast.InputRootRef) && !r.HasPrefix(ast.DefaultRootRef)) {
		return
	}
	for _, p := range r[1:] {
		switch p.Value.(type) {
		case ast.String, ast.Number, ast.Boolean, ast.Null:
		default:
			return
		}
	}
	s.known[r.String()] = b
}

func (pc *programCompiler) expr(s *bodyScope, x *ast.Expr) (progExpr, error) {
	if len(x.With) > 0 {
		return progExpr{}, unsupported("with in %v", x)
	}
	count := map[ast.Var]int{}
	switch ts := x.Terms.(type) {
	case *ast.Term:
		unbound(s, ts, count)
	case []*ast.Term:
		for _, a := range ts[1:] {
			unbound(s, a, count)
		}
	default:
		return progExpr{}, unsupported("expression %v", x)
	}
	for v, n := range count {
		if n > 1 {
			return progExpr{}, unsupported("unbound variable %v occurs %d times in %v", v, n, x)
		}
	}
	if !x.Negated {
		e, err := pc.positive(s, x)
		if err == nil {
			s.pin(x)
		}
		return e, err
	}
	// Rego binds no variable in a negated expression: the compiler moves it after the
	// expressions binding its variables (`not input.a[x]; input.b[x]` is evaluated as
	// `input.b[x]; not input.a[x]`), or refuses it as unsafe. Taken as local to the negation
	// such a variable would make `not` hold where topdown's does not.
	if len(count) > 0 {
		return progExpr{}, unsupported("negated %v has a variable not yet bound", x)
	}
	e, err := pc.positive(s, x)
	if err != nil {
		return progExpr{}, err
	}
	guards, err := pc.terms(s, negationGuards(x))
	if err != nil {
		return progExpr{}, err
	}
	if e.test == nil || !allVals(guards) { // with its variables all bound, nothing binds
		return progExpr{}, unsupported("negated %v binds a variable", x)
	}
	test := e.test
	if len(guards) == 0 {
		return progExpr{negated: true, test: test}, nil
	}
	return progExpr{test: func(ev *progEval, fr []*ast.Term) bool {
		for _, g := range guards {
			if _, ok := g.val(ev, fr); !ok {
				return false // the body fails, as topdown's on the hoisted term
			}
		}
		return !test(ev, fr)
	}}, nil
}

// negationGuards are the terms of the negated x that OPA's compiler hoists out of the
// negation, as expressions before it: when one is undefined (a missing input field, a
// built-in's error) topdown's body fails where `not` alone would hold. They are the calls
// nested in x's operands (ast's expandExpr), then the refs among a call's operands, or in an
// equality's (or term's) composites and path elements (ast's rewriteDynamics, after
// rewriteEquals made `a == b` an equality). Only the outermost of nested ones are kept: an
// inner one undefined leaves its outer one undefined.
func negationGuards(x *ast.Expr) []*ast.Term {
	var guards []*ast.Term
	var calls, refs func(t *ast.Term)
	calls = func(t *ast.Term) {
		switch v := t.Value.(type) {
		case ast.Call:
			guards = append(guards, t)
		case ast.Ref:
			for _, p := range v {
				calls(p)
			}
		case *ast.Array:
			v.Foreach(calls)
		case ast.Set:
			v.Foreach(calls)
		case ast.Object:
			v.Foreach(func(k, e *ast.Term) { calls(k); calls(e) })
		}
	}
	refs = func(t *ast.Term) { // calls are guarded already
		switch v := t.Value.(type) {
		case ast.Ref:
			guards = append(guards, t)
		case *ast.Array:
			v.Foreach(refs)
		case ast.Set:
			v.Foreach(refs)
		case ast.Object:
			v.Foreach(func(k, e *ast.Term) { refs(k); refs(e) })
		}
	}
	inTerm := func(t *ast.Term) {
		if r, ok := t.Value.(ast.Ref); ok {
			for _, p := range r[1:] {
				refs(p)
			}
			return
		}
		refs(t)
	}
	switch ts := x.Terms.(type) {
	case *ast.Term:
		calls(ts)
		inTerm(ts)
	case []*ast.Term:
		for _, t := range ts[1:] {
			calls(t)
		}
		op := x.Operator().String()
		if len(ts) == 3 && (op == ast.Equality.Name || op == ast.Assign.Name || op == ast.Equal.Name) {
			inTerm(ts[1])
			inTerm(ts[2])
			break
		}
		for _, t := range ts[1:] {
			refs(t)
		}
	}
	return guards
}

// positive compiles x without its negation.
func (pc *programCompiler) positive(s *bodyScope, x *ast.Expr) (progExpr, error) {
	var t progTerm
	var err error
	switch ts := x.Terms.(type) {
	case *ast.Term:
		t, err = pc.term(s, ts)
	case []*ast.Term:
		op := x.Operator().String()
		args := ts[1:]
		if (op == ast.Equality.Name || op == ast.Assign.Name) && len(args) == 2 {
			return pc.unify(s, args[0], args[1])
		}
		bi, ok := ast.BuiltinMap[op]
		if !ok || len(args) != bi.Decl.Arity()+1 {
			t, err = pc.call(s, op, args)
			break
		}
		var joined bool
		if t, joined, err = pc.joinIs(s, op, args); joined || err != nil {
			break
		}
		// The output captured: bound to a variable, or compared with a value.
		if t, err = pc.call(s, op, args[:len(args)-1]); err != nil {
			return progExpr{}, err
		}
		return pc.match(s, t, args[len(args)-1])
	}
	if err != nil {
		return progExpr{}, err
	}
	if t.val != nil {
		return progExpr{test: func(ev *progEval, fr []*ast.Term) bool {
			v, ok := t.val(ev, fr)
			return ok && truthy(v)
		}}, nil
	}
	at := pc.site()
	each := pc.fn(func(ev *progEval) func(*ast.Term) bool {
		st := &ev.sites[at]
		return func(v *ast.Term) bool { return !truthy(v) || st.cont() }
	})
	return progExpr{solve: func(ev *progEval, fr []*ast.Term, yield func() bool) bool {
		ev.sites[at].cont = yield
		return t.gen(ev, fr, ev.fns[each])
	}}, nil
}

// joinIs compiles `concat(sep, [...], s)` for constant strings sep and s (partial
// evaluation's test of a subject key, `concat(":", ["group", g]) = "group:support"`) as
// whether the array's strings joined by sep are s, without making the string: false when
// an element is not a string, where concat fails. ok is false for any other expression.
func (pc *programCompiler) joinIs(s *bodyScope, op string, args []*ast.Term) (t progTerm, ok bool, err error) {
	if op != ast.Concat.Name || len(args) != 3 {
		return progTerm{}, false, nil
	}
	sep, sepOK := args[0].Value.(ast.String)
	want, wantOK := args[2].Value.(ast.String)
	if _, isArray := args[1].Value.(*ast.Array); !sepOK || !wantOK || !isArray || ast.IsConstant(args[1].Value) {
		return progTerm{}, false, nil
	}
	parts, err := pc.composite(s, args[1], true)
	if err != nil {
		return progTerm{}, false, err
	}
	is := func(v *ast.Term) *ast.Term {
		return ast.InternedTerm(joins(v.Value.(*ast.Array), string(sep), string(want)))
	}
	if parts.val != nil {
		return progTerm{val: func(ev *progEval, fr []*ast.Term) (*ast.Term, bool) {
			v, ok := parts.val(ev, fr)
			if !ok {
				return nil, false
			}
			return is(v), true
		}}, true, nil
	}
	at := pc.site()
	each := pc.fn(func(ev *progEval) func(*ast.Term) bool {
		st := &ev.sites[at]
		return func(v *ast.Term) bool { return st.yield(is(v)) }
	})
	return progTerm{gen: func(ev *progEval, fr []*ast.Term, yield func(*ast.Term) bool) bool {
		ev.sites[at].yield = yield
		return parts.gen(ev, fr, ev.fns[each])
	}}, true, nil
}

// joins reports whether the elements of arr joined by sep are s, as concat makes it: false
// when one is not a string.
func joins(arr *ast.Array, sep, s string) bool {
	for i := range arr.Len() {
		e, ok := arr.Elem(i).Value.(ast.String)
		if !ok {
			return false
		}
		if i > 0 {
			if !strings.HasPrefix(s, sep) {
				return false
			}
			s = s[len(sep):]
		}
		if !strings.HasPrefix(s, string(e)) {
			return false
		}
		s = s[len(e):]
	}
	return s == ""
}

// unify compiles a = b: a variable not yet bound on one side is bound to each value of the
// other; else some values of the two must be equal, as topdown's unification of ground
// terms.
func (pc *programCompiler) unify(s *bodyScope, a, b *ast.Term) (progExpr, error) {
	if v, ok := b.Value.(ast.Var); ok && !s.bound[v] {
		a, b = b, a
	}
	if _, ok := a.Value.(ast.Var); ok {
		tb, err := pc.term(s, b)
		if err != nil {
			return progExpr{}, err
		}
		return pc.match(s, tb, a)
	}
	ta, err := pc.term(s, a)
	if err != nil {
		return progExpr{}, err
	}
	return pc.match(s, ta, b)
}

// match compiles "t's value equals other": other is a variable not yet bound (bound to it
// then) or a term of its own.
func (pc *programCompiler) match(s *bodyScope, t progTerm, other *ast.Term) (progExpr, error) {
	if v, ok := other.Value.(ast.Var); ok && !s.bound[v] {
		i := s.slot(v)
		s.bound[v] = true
		if t.konst != nil {
			s.known[v.String()] = t.konst
		}
		if t.val != nil {
			return progExpr{bind: func(ev *progEval, fr []*ast.Term) bool {
				val, ok := t.val(ev, fr)
				fr[i] = val
				return ok
			}}, nil
		}
		at := pc.site()
		each := pc.fn(func(ev *progEval) func(*ast.Term) bool {
			st := &ev.sites[at]
			return func(val *ast.Term) bool {
				st.fr[i] = val
				return st.cont()
			}
		})
		return progExpr{solve: func(ev *progEval, fr []*ast.Term, yield func() bool) bool {
			st := &ev.sites[at]
			st.fr, st.cont = fr, yield
			return t.each(ev, fr, ev.fns[each])
		}}, nil
	}
	o, err := pc.term(s, other)
	if err != nil {
		return progExpr{}, err
	}
	if t.val != nil && o.val != nil {
		return progExpr{test: func(ev *progEval, fr []*ast.Term) bool {
			a, ok := t.val(ev, fr)
			if !ok {
				return false
			}
			b, ok := o.val(ev, fr)
			return ok && a.Equal(b)
		}}, nil
	}
	at := pc.site()
	inner := pc.fn(func(ev *progEval) func(*ast.Term) bool {
		st := &ev.sites[at]
		return func(b *ast.Term) bool { return !st.a.Equal(b) || st.cont() }
	})
	outer := pc.fn(func(ev *progEval) func(*ast.Term) bool {
		st := &ev.sites[at]
		return func(a *ast.Term) bool {
			st.a = a
			return o.each(ev, st.fr, ev.fns[inner])
		}
	})
	return progExpr{solve: func(ev *progEval, fr []*ast.Term, yield func() bool) bool {
		st := &ev.sites[at]
		st.fr, st.cont = fr, yield
		return t.each(ev, fr, ev.fns[outer])
	}}, nil
}

// call compiles a call of a built-in with its declared arity. A built-in's error leaves the
// call undefined, as topdown does when built-in errors are not strict; a Halt is the
// evaluation's error.
func (pc *programCompiler) call(s *bodyScope, op string, args []*ast.Term) (progTerm, error) {
	bi, ok := ast.BuiltinMap[op]
	f := topdown.GetBuiltin(op)
	if !ok || f == nil || !residualBuiltins[op] {
		return progTerm{}, unsupported("built-in %s", op)
	}
	if bi.Decl.Arity() != len(args) {
		return progTerm{}, unsupported("%s called with %d arguments", op, len(args))
	}
	if t, ok, err := pc.hasKey(s, op, args); ok || err != nil {
		return t, err
	}
	ts, err := pc.operands(s, op, args)
	if err != nil {
		return progTerm{}, err
	}
	if vals, ok := konsts(ts); ok {
		// The allowed built-ins are functions of their operands alone: with constant ones
		// the output is made once. Without one (an error) the evaluation calls it, as before.
		ev := &progEval{bctx: topdown.BuiltinContext{Context: context.Background()}}
		ev.iter = ev.first
		if out, ok := ev.call(op, f, vals); ok {
			return constant(out), nil
		}
	}
	off := pc.slots(len(ts))
	if allVals(ts) {
		call := func(ev *progEval, fr []*ast.Term) (*ast.Term, bool) {
			operands, ok := ev.values(ts, off, fr)
			if !ok {
				return nil, false
			}
			return ev.call(op, f, operands)
		}
		if hasVars(args) {
			return progTerm{val: call}, nil
		}
		// Without variables the call has one output per evaluation, whichever rule makes it
		// (object.keys(input) appears in four of full_decision's): made once.
		text := ast.CallTerm(append([]*ast.Term{ast.NewTerm(bi.Ref())}, args...)...).String()
		slot, ok := pc.calls[text]
		if !ok {
			slot = len(pc.calls)
			pc.calls[text] = slot
		}
		return progTerm{val: func(ev *progEval, fr []*ast.Term) (*ast.Term, bool) {
			if v := ev.calls[slot]; v != nil {
				return v, v != undefinedTerm
			}
			v, ok := call(ev, fr)
			ev.calls[slot] = undefinedTerm
			if ok {
				ev.calls[slot] = v
			}
			return v, ok
		}}, nil
	}
	return progTerm{gen: pc.product(ts, off, func(ev *progEval, st *site, operands []*ast.Term) bool {
		v, ok := ev.call(op, f, operands)
		return !ok || st.yield(v)
	})}, nil
}

// operandArrays are the built-ins whose output holds no part of an array operand but its
// elements: a string made of them (concat returns the one element of a one-element array).
// An array built for one of them is set in an array of the evaluation (ev.arrs), made
// once, rather than allocated on every call: sprintf's arguments, concat's parts.
var operandArrays = map[string]bool{"sprintf": true, "concat": true}

// operands compiles a call's operands, as terms does, an array built for an operandArrays
// built-in in an array of the evaluation.
func (pc *programCompiler) operands(s *bodyScope, op string, args []*ast.Term) ([]progTerm, error) {
	if !operandArrays[op] {
		return pc.terms(s, args)
	}
	out := make([]progTerm, len(args))
	for i, a := range args {
		var err error
		if _, isArray := a.Value.(*ast.Array); isArray && !ast.IsConstant(a.Value) {
			out[i], err = pc.composite(s, a, true)
		} else {
			out[i], err = pc.term(s, a)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// hasKey compiles `internal.member_2(k, object.keys(x))` for a constant string k (the
// policy's test that an input field is present, null or not) as a lookup of k in x, without
// making x's set of keys: undefined when x is not an object, as object.keys is. ok is false
// for any other call.
func (pc *programCompiler) hasKey(s *bodyScope, op string, args []*ast.Term) (progTerm, bool, error) {
	if op != "internal.member_2" || len(args) != 2 {
		return progTerm{}, false, nil
	}
	key, isString := args[0].Value.(ast.String)
	keys, isCall := args[1].Value.(ast.Call)
	if !isString || !isCall || len(keys) != 2 || !keys[0].Equal(ast.NewTerm(ast.ObjectKeys.Ref())) ||
		hasVars(keys[1:]) { // with a variable to bind, x is a generator: the call as it is
		return progTerm{}, false, nil
	}
	x, err := pc.term(s, keys[1])
	if err != nil {
		return progTerm{}, false, err
	}
	k := ast.NewTerm(key)
	return progTerm{val: func(ev *progEval, fr []*ast.Term) (*ast.Term, bool) {
		v, ok := x.val(ev, fr)
		if !ok {
			return nil, false
		}
		obj, isObject := v.Value.(ast.Object)
		if !isObject {
			return nil, false
		}
		return ast.InternedTerm(obj.Get(k) != nil), true
	}}, true, nil
}

// values evaluates ts (all vals) into the operand slots from off; false when one is
// undefined.
func (ev *progEval) values(ts []progTerm, off int, fr []*ast.Term) ([]*ast.Term, bool) {
	vals := ev.ops[off : off+len(ts) : off+len(ts)]
	for i, t := range ts {
		v, ok := t.val(ev, fr)
		if !ok {
			return nil, false
		}
		vals[i] = v
	}
	return vals, true
}

// call calls a built-in, which must not keep operands.
func (ev *progEval) call(op string, f topdown.BuiltinFunc, operands []*ast.Term) (*ast.Term, bool) {
	ev.out = nil
	if err := f(ev.bctx, operands, ev.iter); err != nil {
		var halt topdown.Halt
		if errors.As(err, &halt) && ev.err == nil {
			ev.err = fmt.Errorf("%s: %w", op, halt.Err)
		}
	}
	out := ev.out
	ev.out = nil
	return out, out != nil && ev.err == nil
}

// hasVars reports whether a variable occurs in ts (input and data, refs' heads, and calls'
// operators are none).
func hasVars(ts []*ast.Term) bool {
	vis := ast.NewVarVisitor().WithParams(ast.VarVisitorParams{SkipRefHead: true, SkipRefCallHead: true})
	for _, t := range ts {
		vis.Walk(t)
	}
	return len(vis.Vars()) > 0
}

func allVals(ts []progTerm) bool {
	for _, t := range ts {
		if t.val == nil {
			return false
		}
	}
	return true
}

// terms compiles ts left to right: a variable one binds is bound for the next.
func (pc *programCompiler) terms(s *bodyScope, ts []*ast.Term) ([]progTerm, error) {
	out := make([]progTerm, len(ts))
	for i, t := range ts {
		var err error
		if out[i], err = pc.term(s, t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// product compiles the generator of each combination of the values of ts, set in the
// operand slots from off, handed to done with the site's state.
func (pc *programCompiler) product(ts []progTerm, off int,
	done func(ev *progEval, st *site, vals []*ast.Term) bool) func(ev *progEval, fr []*ast.Term, yield func(*ast.Term) bool) bool {
	at, n := pc.site(), len(ts)
	step := func(ev *progEval, st *site, i int) bool {
		vals := ev.ops[off : off+n : off+n]
		for ; i < n; i++ {
			if ts[i].gen != nil {
				return ts[i].gen(ev, st.fr, ev.fns[ts[i].next])
			}
			v, ok := ts[i].val(ev, st.fr)
			if !ok {
				return true
			}
			vals[i] = v
		}
		return done(ev, st, vals)
	}
	for i := range ts {
		if ts[i].gen != nil {
			ts[i].next = pc.fn(func(ev *progEval) func(*ast.Term) bool {
				st := &ev.sites[at]
				return func(v *ast.Term) bool {
					ev.ops[off+i] = v
					return step(ev, st, i+1)
				}
			})
		}
	}
	return func(ev *progEval, fr []*ast.Term, yield func(*ast.Term) bool) bool {
		st := &ev.sites[at]
		st.fr, st.yield = fr, yield
		return step(ev, st, 0)
	}
}

func (pc *programCompiler) term(s *bodyScope, t *ast.Term) (progTerm, error) {
	switch v := t.Value.(type) {
	case ast.Null, ast.Boolean, ast.Number, ast.String:
		return constant(t), nil
	case ast.Var:
		if !s.bound[v] {
			return progTerm{}, unsupported("variable %v read before it is bound", v)
		}
		if k, ok := s.known[v.String()]; ok {
			return constant(k), nil
		}
		i := s.slot(v)
		return progTerm{val: func(_ *progEval, fr []*ast.Term) (*ast.Term, bool) { return fr[i], true }}, nil
	case ast.Ref:
		if k, ok := s.known[v.String()]; ok {
			return constant(k), nil
		}
		return pc.ref(s, v)
	case ast.Call:
		return pc.call(s, v[0].String(), v[1:])
	}
	if ast.IsConstant(t.Value) {
		return constant(t), nil
	}
	return pc.composite(s, t, false)
}

// composite compiles an array, set or object with variables, refs or calls in it (an
// object's keys constant). An operand array (operands) is set in an array of the
// evaluation, valid until the site makes its next value.
func (pc *programCompiler) composite(s *bodyScope, t *ast.Term, operand bool) (progTerm, error) {
	var elems []*ast.Term
	var build func(vals []*ast.Term) *ast.Term
	switch v := t.Value.(type) {
	case *ast.Array:
		v.Foreach(func(e *ast.Term) { elems = append(elems, e) })
		build = func(vals []*ast.Term) *ast.Term { return ast.ArrayTerm(append([]*ast.Term(nil), vals...)...) }
	case ast.Set:
		v.Foreach(func(e *ast.Term) { elems = append(elems, e) })
		build = func(vals []*ast.Term) *ast.Term { return ast.SetTerm(vals...) }
	case ast.Object:
		var keys []*ast.Term
		constKeys := true
		v.Foreach(func(k, e *ast.Term) {
			constKeys = constKeys && ast.IsConstant(k.Value)
			keys, elems = append(keys, k), append(elems, e)
		})
		if !constKeys {
			return progTerm{}, unsupported("object %v with a key that is not constant", t)
		}
		build = func(vals []*ast.Term) *ast.Term {
			var buf [8][2]*ast.Term // NewObject allocates the pairs' elements in one block
			pairs := buf[:0]
			for i, k := range keys {
				pairs = append(pairs, [2]*ast.Term{k, vals[i]})
			}
			return ast.NewTerm(ast.NewObject(pairs...))
		}
	default:
		return progTerm{}, unsupported("term %v", t)
	}
	ts, err := pc.terms(s, elems)
	if err != nil {
		return progTerm{}, err
	}
	if vals, ok := konsts(ts); ok {
		return constant(build(vals)), nil
	}
	produce := func(_ *progEval, vals []*ast.Term) *ast.Term { return build(vals) }
	if operand {
		at := len(pc.arrays)
		pc.arrays = append(pc.arrays, len(ts))
		produce = func(ev *progEval, vals []*ast.Term) *ast.Term {
			arr := ev.arrs[at].Value.(*ast.Array)
			for i, v := range vals {
				arr.Set(i, v)
			}
			return ev.arrs[at]
		}
	}
	off := pc.slots(len(ts)) // produce copies the values out of the slots
	if allVals(ts) {
		return progTerm{val: func(ev *progEval, fr []*ast.Term) (*ast.Term, bool) {
			vals, ok := ev.values(ts, off, fr)
			if !ok {
				return nil, false
			}
			return produce(ev, vals), true
		}}, nil
	}
	return progTerm{gen: pc.product(ts, off, func(ev *progEval, st *site, vals []*ast.Term) bool {
		return st.yield(produce(ev, vals))
	})}, nil
}

func constant(t *ast.Term) progTerm {
	return progTerm{val: func(*progEval, []*ast.Term) (*ast.Term, bool) { return t, true }, konst: t}
}

// konsts are the values of ts when all are constants (konst).
func konsts(ts []progTerm) ([]*ast.Term, bool) {
	vals := make([]*ast.Term, len(ts))
	for i, t := range ts {
		if t.konst == nil {
			return nil, false
		}
		vals[i] = t.konst
	}
	return vals, true
}

// ref compiles a ref into input, or into the value of a rule of the residual (the rule
// named by a prefix of the ref).
func (pc *programCompiler) ref(s *bodyScope, r ast.Ref) (progTerm, error) {
	var root func(ev *progEval) (*ast.Term, bool)
	var path ast.Ref
	switch {
	case r.HasPrefix(ast.InputRootRef):
		root = func(ev *progEval) (*ast.Term, bool) { return ev.input, true }
		path = r[1:]
	case r.HasPrefix(ast.DefaultRootRef):
		for n := len(r); n > 1 && root == nil; n-- {
			if !r[:n].IsGround() {
				continue
			}
			if _, ok := pc.defs[r[:n].String()]; !ok {
				continue
			}
			rule, err := pc.rule(r[:n].String())
			if err != nil {
				return progTerm{}, err
			}
			root = func(ev *progEval) (*ast.Term, bool) { return ev.rule(rule) }
			path = r[n:]
		}
		if root == nil {
			return progTerm{}, unsupported("ref %v names no rule of the residual", r)
		}
	default:
		return progTerm{}, unsupported("ref %v", r)
	}
	// A path element is a constant key, a variable (bound here, or read) or a term without
	// variables to bind, whose value is the key.
	type step struct {
		key  *ast.Term
		slot int
		bind bool
		term func(ev *progEval, fr []*ast.Term) (*ast.Term, bool)
	}
	steps := make([]step, len(path))
	binds := false
	for i, p := range path {
		switch v := p.Value.(type) {
		case ast.String, ast.Number, ast.Boolean, ast.Null:
			steps[i] = step{key: p}
		case ast.Var:
			steps[i] = step{slot: s.slot(v), bind: !s.bound[v]}
			binds = binds || steps[i].bind
			s.bound[v] = true
		default:
			t, err := pc.term(s, p)
			if err != nil {
				return progTerm{}, err
			}
			if t.val == nil {
				return progTerm{}, unsupported("path element %v of %v binds a variable", p, r)
			}
			steps[i] = step{term: t.val}
		}
	}
	// key is the key of a step that binds nothing, false when undefined.
	key := func(st step, ev *progEval, fr []*ast.Term) (*ast.Term, bool) {
		switch {
		case st.key != nil:
			return st.key, true
		case st.term != nil:
			return st.term(ev, fr)
		}
		return fr[st.slot], true
	}
	if !binds {
		return progTerm{val: func(ev *progEval, fr []*ast.Term) (*ast.Term, bool) {
			t, ok := root(ev)
			for _, st := range steps {
				if !ok {
					return nil, false
				}
				k, defined := key(st, ev, fr)
				if !defined {
					return nil, false
				}
				t = child(t, k)
				ok = t != nil
			}
			return t, ok
		}}, nil
	}
	// A step binding a variable walks a collection: its continuations (stop when they
	// return true, as Until's) are made once per evaluation, at kvs[i] and fns[i].
	at := pc.site()
	kvs, fns := make([]int, len(steps)), make([]int, len(steps))
	var walk func(ev *progEval, st *site, t *ast.Term, i int) bool
	walk = func(ev *progEval, st *site, t *ast.Term, i int) bool {
		if i == len(steps) {
			return st.yield(t)
		}
		step := steps[i]
		if !step.bind {
			k, defined := key(step, ev, st.fr)
			if !defined {
				return true
			}
			if next := child(t, k); next != nil {
				return walk(ev, st, next, i+1)
			}
			return true
		}
		switch c := t.Value.(type) {
		case ast.Object:
			return !c.Until(ev.kvs[kvs[i]])
		case *ast.Array:
			each := ev.kvs[kvs[i]]
			for j := range c.Len() {
				if each(ast.InternedTerm(j), c.Elem(j)) {
					return false
				}
			}
		case ast.Set:
			return !c.Until(ev.fns[fns[i]])
		}
		return true
	}
	for i, step := range steps {
		if !step.bind {
			continue
		}
		kvs[i] = len(pc.kvs)
		pc.kvs = append(pc.kvs, func(ev *progEval) func(k, v *ast.Term) bool {
			st := &ev.sites[at]
			return func(k, v *ast.Term) bool {
				st.fr[step.slot] = k
				return !walk(ev, st, v, i+1)
			}
		})
		fns[i] = pc.fn(func(ev *progEval) func(*ast.Term) bool {
			st := &ev.sites[at]
			return func(e *ast.Term) bool {
				st.fr[step.slot] = e
				return !walk(ev, st, e, i+1)
			}
		})
	}
	return progTerm{gen: func(ev *progEval, fr []*ast.Term, yield func(*ast.Term) bool) bool {
		t, ok := root(ev)
		if !ok {
			return true
		}
		st := &ev.sites[at]
		st.fr, st.yield = fr, yield
		return walk(ev, st, t, 0)
	}}, nil
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

// eval evaluates the program over input: the main rule's value, nil when undefined. Only an
// error of the evaluation itself (a complete rule's conflict, a Halt of a built-in, the
// context's end) is returned; the caller denies on it.
func (p *residualProgram) eval(ctx context.Context, input ast.Value) (*ast.Term, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ev := p.begin(ctx, input)
	v, ok := ev.rule(p.main)
	err := ev.err
	p.end(ev)
	if err != nil || !ok {
		return nil, err
	}
	return v, nil
}

// evalFields evaluates a program of fields (p.fields not nil) over input: use gets the
// object's keys and values, which are the evaluation's until it returns (its error is
// evalFields'); false when the rule is undefined.
func (p *residualProgram) evalFields(ctx context.Context, input ast.Value, use func(keys, vals []*ast.Term) error) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	ev := p.begin(ctx, input)
	defer p.end(ev)
	f := p.fields
	vals, ok := ev.straightFields(f)
	switch {
	case ev.err != nil:
		return false, ev.err
	case !ok:
		return false, nil
	}
	return true, use(f.keys, vals)
}

// straightFields evaluates f's body and then its values: false when one does not hold.
func (ev *progEval) straightFields(f *progFields) ([]*ast.Term, bool) {
	fr, base := ev.frame(&f.body)
	defer func() { ev.top = base }()
	if !ev.conjunction(&f.body, fr) {
		return nil, false
	}
	return ev.values(f.vals, f.off, fr)
}

// begin takes an evaluation's state for input; end gives it back, holding nothing of it.
func (p *residualProgram) begin(ctx context.Context, input ast.Value) *progEval {
	ev := p.evals.Get().(*progEval)
	ev.bctx.Context, ev.input = ctx, ast.NewTerm(input)
	return ev
}

func (p *residualProgram) end(ev *progEval) {
	clear(ev.memo)
	clear(ev.accs)
	clear(ev.stack)
	clear(ev.frs)
	clear(ev.sites)
	clear(ev.ops)
	clear(ev.calls)
	for _, t := range ev.arrs { // holding no term of this input
		arr := t.Value.(*ast.Array)
		for i := range arr.Len() {
			arr.Set(i, ast.InternedNullTerm)
		}
	}
	ev.bctx.Context, ev.input, ev.err, ev.top = nil, nil, nil, 0
	p.evals.Put(ev)
}

// holds evaluates a program of a rule of value true: whether it holds.
func (p *residualProgram) holds(ctx context.Context, input ast.Value) (bool, error) {
	v, err := p.eval(ctx, input)
	return v != nil && truthy(v), err
}

// rule is r's value, evaluated once per evaluation.
func (ev *progEval) rule(r *progRule) (*ast.Term, bool) {
	if v := ev.memo[r.slot]; v != nil {
		return v, v != undefinedTerm
	}
	for i := range r.bodies {
		b := &r.bodies[i]
		if b.straight {
			if v, ok := ev.straight(b); ok {
				ev.add(r, v)
			}
		} else {
			ev.body(b)
		}
		if ev.err != nil {
			return nil, false
		}
		if r.once && ev.accs[r.slot].value != nil {
			break
		}
	}
	acc := &ev.accs[r.slot]
	value := acc.value
	switch {
	case r.partial && acc.set == nil:
		value = emptySet
	case r.partial:
		value = ast.NewTerm(acc.set)
	case value == nil:
		value = r.def
	}
	*acc = ruleAcc{}
	if value == nil {
		ev.memo[r.slot] = undefinedTerm
		return nil, false
	}
	ev.memo[r.slot] = value
	return value, true
}

// frame pushes b's frame, cleared, on the evaluation's stack; the caller takes it off,
// setting ev.top back to base.
func (ev *progEval) frame(b *progBody) (fr []*ast.Term, base int) {
	base = ev.top
	fr = ev.stack[base : base+b.vars : base+b.vars]
	clear(fr)
	ev.top += b.vars
	return fr, base
}

// add adds v to what r's bodies produced: an element of a partial set, or a complete
// rule's value (another value is a conflict: the evaluation's error).
func (ev *progEval) add(r *progRule, v *ast.Term) bool {
	acc := &ev.accs[r.slot]
	switch {
	case r.partial && acc.set == nil:
		acc.set = ast.NewSet(v)
	case r.partial:
		acc.set.Add(v)
	case acc.value == nil:
		acc.value = v
	case !acc.value.Equal(v):
		ev.err = fmt.Errorf("%s: complete rules must not produce multiple outputs", r.path)
	}
	return ev.err == nil
}

// body adds the head's value of each solution of b to its rule.
func (ev *progEval) body(b *progBody) {
	fr, base := ev.frame(b)
	ev.frs[b.index] = fr
	ev.solve(b, fr, 0)
	ev.top = base
}

// solve evaluates b's expressions from i, each generating one's solutions continuing with
// the rest (ev.conts), and adds the head's value of each solution; false when stopped.
func (ev *progEval) solve(b *progBody, fr []*ast.Term, i int) bool {
	for ; i < len(b.exprs); i++ {
		x := &b.exprs[i]
		if x.solve != nil {
			return x.solve(ev, fr, ev.conts[x.cont])
		}
		if !x.holds(ev, fr) || ev.err != nil {
			return ev.err == nil
		}
	}
	v, ok := b.value.val(ev, fr)
	return !ok || ev.add(b.rule, v)
}

// holds evaluates an expression without several solutions.
func (x *progExpr) holds(ev *progEval, fr []*ast.Term) bool {
	if x.bind != nil {
		return x.bind(ev, fr)
	}
	return x.test(ev, fr) != x.negated
}

// straight evaluates a body of at most one solution: its head's value, false when it does
// not hold.
func (ev *progEval) straight(b *progBody) (*ast.Term, bool) {
	fr, base := ev.frame(b)
	defer func() { ev.top = base }()
	if !ev.conjunction(b, fr) {
		return nil, false
	}
	return b.value.val(ev, fr)
}

// conjunction evaluates the expressions of a straight body b in its frame fr: whether all
// hold.
func (ev *progEval) conjunction(b *progBody, fr []*ast.Term) bool {
	for i := range b.exprs {
		if !b.exprs[i].holds(ev, fr) || ev.err != nil {
			return false
		}
	}
	return true
}
