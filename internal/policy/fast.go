package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"

	"github.com/xemahq/xema/internal/bounded"
)

// fastPathSize bounds the entries kept per bundle, one per (ref, org, biome): each holds a
// residual of clean, made in ~10-20 ms of partial evaluation, and once the key has a call
// that is not clean one of full_decision, made in ~25 ms. As residual programs
// (residual.go) the two hold ~110 KB a key at the benchmark's data; compiled for topdown
// (a residual outside the programs' subset) ~80 and ~270 KB.
const fastPathSize = 1024

// fullResidualsKept bounds the residuals of full_decision one bundle makes (~90 MB at the
// benchmark's data if topdown evaluated them all, a third of it as programs): a key's first
// call that is not clean after that many is decided by the full evaluation, as before the
// residual existed.
const fullResidualsKept = 320

// prepareEvery spaces the preparations of a bundle: each holds evalMu alone, so traffic
// over more keys than fastPathSize would otherwise stall decisions back to back; at one per
// 100 ms they hold it at most ~10-20 % of the time.
const prepareEvery = 100 * time.Millisecond

// The fast path's queries. The residuals of clean and full_decision live in their own
// namespace, beside the support rules partial evaluation writes there.
const (
	cleanQuery         = "data.xema.authz.clean"
	cleanDecisionQuery = "decision = data.xema.authz.clean_decision"
	fullDecisionQuery  = "decision = data.xema.authz.full_decision"
	fastNamespace      = "xemafast"
)

var (
	keyInputs     = map[string]bool{"ref": true, "org": true, "biome": true}
	unknownInputs = nonKeyInputs()
	residualPath  = ast.MustParseRef("data." + fastNamespace)
	// One support rule instead of a copy of clean per way a subject is covered, and one deny
	// set that reasons, allow and the suggestions' reason codes share (inlined, each
	// evaluated every deny rule again). (env_kind kept whole decided calls of an undefined
	// environment differently: TestFastPathEquivalent.)
	keptWhole = []string{"data.xema.authz.clean_subject_covered", "data.xema.authz.deny"}
	// allCapabilities are built once: CapabilitiesForThisVersion builds them on every call.
	allCapabilities = ast.CapabilitiesForThisVersion()
)

// evalMu keeps partial evaluation apart from evaluation. OPA's copy propagation, run by
// partial evaluation, stores values back into the terms it walks (ast.transformTerm),
// among them terms every evaluation reads: the interned true/false/numbers and the store's
// values. It stores the values they already hold, but unsynchronized that is still a data
// race; so a partial evaluation (and the compiling of its residual) holds evalMu alone and
// every evaluation of the package shares it.
var evalMu sync.RWMutex

// nonKeyInputs are the input fields the fast path leaves unknown: every field of Input
// (by its JSON name) but the key's, so a field added to Input is unknown too.
func nonKeyInputs() []string {
	t := reflect.TypeFor[Input]()
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if !keyInputs[name] {
			out = append(out, "input."+name)
		}
	}
	return out
}

// fastPath decides calls without evaluating the policy in full. For each (ref, org, biome)
// it partially evaluates data.xema.authz.clean with those input fields known and the
// others unknown, data.xema.authz.clean_decision, which must then be a constant
// (authz.rego: decision is clean_decision whenever clean holds), and
// data.xema.authz.full_decision. A call whose residual of clean holds gets that constant,
// one whose residual does not gets the residual of full_decision (full_decision itself
// when that residual still needs the policy's rules), and a key without a residual
// evaluates decision. One fastPath belongs to one compiled bundle, so a new revision
// starts empty.
type fastPath struct {
	modules []*ast.Module
	store   storage.Store
	// queries compiles the partial queries once, on the first call of the bundle.
	queries func() (fastQueries, error)
	entries *bounded.Map[fastKey, *fastEntry]
	// A key gets its residual on its second call (seen holds keys called once), one at a
	// time (preparing) and one per `every`: traffic over more keys than entries hold then
	// costs a bounded share of partial evaluations, the other calls taking the full path
	// meanwhile.
	seen      *bounded.Map[fastKey, struct{}]
	preparing sync.Mutex
	// every spaces preparations (prepareEvery; 0 in tests); last is when one last ended,
	// under preparing.
	every time.Duration
	last  time.Time
	// fullMade counts the residuals of full_decision made, at most fullLimit
	// (fullResidualsKept; smaller in tests), under the exclusive preparation.
	fullMade, fullLimit int
	// waiting, in tests, is called while a preparation waits for evalMu.
	waiting func()
}

type fastQueries struct{ clean, decision, full rego.PreparedPartialQuery }

type fastKey struct{ ref, org, biome string }

// fastEntry is what partial evaluation left for one key.
type fastEntry struct {
	// program, or else residual, evaluates clean over the full input; both nil when
	// clean_decision is not a constant (every call of the key evaluates decision) or clean
	// never holds. residual is topdown's evaluation, for a residual outside the program's
	// subset (residual.go).
	program    *residualProgram
	residual   *rego.PreparedEvalQuery
	neverClean bool
	decision   Decision
	// full is the residual of full_decision, made on the key's first call that is not clean
	// (a key whose calls are all allowed never pays for it); nil until then.
	full atomic.Pointer[fullResidual]
}

// fullResidual evaluates full_decision over the full input, by program or else by q
// (topdown, for a residual outside the program's subset); both are nil when the residual
// still refers to the policy's rules (compiling them into every entry would cost
// megabytes) or could not be made: full_decision then decides.
type fullResidual struct {
	program *residualProgram
	q       *rego.PreparedEvalQuery
}

func newFastPath(mods []*ast.Module, store storage.Store) *fastPath {
	f := &fastPath{
		modules: mods, store: store,
		entries: bounded.New[fastKey, *fastEntry](fastPathSize),
		seen:    bounded.New[fastKey, struct{}](4 * fastPathSize),
		every:   prepareEvery, fullLimit: fullResidualsKept,
	}
	f.queries = sync.OnceValues(func() (q fastQueries, err error) {
		ctx := context.Background() // compiling depends on no request
		if q.clean, err = f.preparePartial(ctx, cleanQuery); err != nil {
			return q, err
		}
		if q.decision, err = f.preparePartial(ctx, cleanDecisionQuery); err != nil {
			return q, err
		}
		q.full, err = f.preparePartial(ctx, fullDecisionQuery)
		return q, err
	})
	return f
}

func (f *fastPath) preparePartial(ctx context.Context, query string) (rego.PreparedPartialQuery, error) {
	opts := []func(*rego.Rego){
		rego.Query(query), rego.Store(f.store), rego.Unknowns(unknownInputs),
		rego.PartialNamespace(fastNamespace), rego.DisableInlining(keptWhole),
	}
	for _, m := range f.modules {
		opts = append(opts, rego.ParsedModule(m))
	}
	pq, err := rego.New(opts...).PrepareForPartial(ctx)
	if err != nil {
		return pq, fmt.Errorf("fast path: prepare %s: %w", query, err)
	}
	return pq, nil
}

// outcome is what the fast path knows of a call.
type outcome int

const (
	undecided    outcome = iota // no residual (yet) for its key: evaluate decision
	decidedClean                // clean holds: the decision is the key's clean_decision
	decidedFull                 // clean does not hold: decided by the key's full_decision
	notClean                    // clean does not hold: the decision is full_decision
)

// decide tells whether the call (in, and input, its input document) is clean, with its
// decision when it is or when the key's residual of full_decision decided it. An error is
// an error of the decision: the caller denies.
func (f *fastPath) decide(ctx context.Context, in Input, input ast.Value) (Decision, outcome, error) {
	key := fastKey{ref: in.Ref, org: in.Org, biome: in.Biome}
	ent, hit := f.entries.Get(key, nil)
	if !hit {
		if _, again := f.seen.Get(key, nil); !again {
			f.seen.Put(key, struct{}{})
			return Decision{}, undecided, nil
		}
		var err error
		ran := f.exclusive(func() {
			if ent, err = f.prepare(ctx, key); err != nil && ctx.Err() == nil {
				// The fast path is an optimisation: a key it cannot prepare is decided in
				// full, never denied for it, and not prepared again for this bundle.
				slog.Warn("policy fast path: key left to the full evaluation", "ref", key.ref, "org", key.org, "err", err)
				ent, err = &fastEntry{}, nil
			}
			if err == nil {
				f.entries.Put(key, ent) // under preparing: no second preparation of the key
				f.seen.Delete(key)
			}
		})
		switch {
		case !ran:
			return Decision{}, undecided, nil
		case err != nil:
			return Decision{}, undecided, err // the call's own context ended
		}
	}
	return f.decideBy(ctx, key, ent, input)
}

// lockWait bounds how long a preparation waits to hold evalMu alone.
const lockWait = 50 * time.Millisecond

// exclusive runs prepare holding evalMu alone, one preparation at a time and one per
// f.every; it reports false when it did not run (another was running, one ran too
// recently, or evalMu stayed shared for lockWait).
//
// It never waits in evalMu.Lock: a writer blocked there makes every new RLock wait too, so
// one long evaluation (a search over a large first cut holds RLock for up to seconds)
// would stall every decision behind the preparation. It retries TryLock instead, and gives
// up after lockWait; a later call prepares the key.
func (f *fastPath) exclusive(prepare func()) bool {
	if !f.preparing.TryLock() {
		return false
	}
	defer f.preparing.Unlock()
	if time.Since(f.last) < f.every {
		return false
	}
	defer func() { f.last = time.Now() }()
	for deadline := time.Now().Add(lockWait); !evalMu.TryLock(); {
		if f.waiting != nil {
			f.waiting()
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Microsecond)
	}
	prepare()
	evalMu.Unlock()
	return true
}

func (f *fastPath) decideBy(ctx context.Context, key fastKey, ent *fastEntry, input ast.Value) (Decision, outcome, error) {
	if ent.program == nil && ent.residual == nil && !ent.neverClean {
		return Decision{}, undecided, nil
	}
	if !ent.neverClean {
		clean, err := ent.holds(ctx, input)
		switch {
		case err != nil:
			return Decision{}, undecided, err
		case clean:
			return ent.decision.clone(), decidedClean, nil
		}
	}
	full := ent.full.Load()
	if full == nil {
		f.exclusive(func() {
			if ent.full.Load() != nil { // made while this call waited
				return
			}
			if f.fullMade >= f.fullLimit {
				ent.full.Store(&fullResidual{}) // the full evaluation decides
				return
			}
			f.fullMade++
			fr, err := f.prepareFull(ctx, key)
			if err != nil && ctx.Err() != nil {
				return // the call's own context ended: a later call makes it
			}
			if err != nil {
				slog.Warn("policy fast path: full_decision left to the full evaluation", "ref", key.ref, "org", key.org, "err", err)
				fr = &fullResidual{}
			}
			ent.full.Store(fr)
		})
		full = ent.full.Load()
	}
	if full == nil || (full.program == nil && full.q == nil) {
		return Decision{}, notClean, nil
	}
	d, err := full.decide(ctx, input)
	if err != nil {
		return Decision{}, undecided, fmt.Errorf("fast path: residual of full_decision: %w", err)
	}
	return d, decidedFull, nil
}

// decide evaluates the residual of full_decision.
func (fr *fullResidual) decide(ctx context.Context, input ast.Value) (Decision, error) {
	if fr.program == nil {
		return evaluateDecision(ctx, *fr.q, input)
	}
	evalMu.RLock() // until the result, which holds the residual's terms, is decoded
	defer evalMu.RUnlock()
	if fr.program.fields != nil { // the decision object is not made, its fields decoded
		var d Decision
		defined, err := fr.program.evalFields(ctx, input, func(keys, vals []*ast.Term) (err error) {
			d, err = decodeFields(pairs{keys, vals})
			return err
		})
		switch {
		case err != nil && !defined:
			return Decision{}, fmt.Errorf("evaluate: %w", err)
		case err != nil:
			return Decision{}, fmt.Errorf("decode decision: %w", err)
		case !defined:
			return Decision{}, errors.New("decision undefined")
		}
		return d, nil
	}
	v, err := fr.program.eval(ctx, input)
	switch {
	case err != nil:
		return Decision{}, fmt.Errorf("evaluate: %w", err)
	case v == nil:
		return Decision{}, errors.New("decision undefined")
	}
	d, err := decodeDecision(v.Value)
	if err != nil {
		return Decision{}, fmt.Errorf("decode decision: %w", err)
	}
	return d, nil
}

// holds evaluates the residual of clean.
func (ent *fastEntry) holds(ctx context.Context, input ast.Value) (bool, error) {
	evalMu.RLock() // until the result is read; a program reads terms partial evaluation writes
	defer evalMu.RUnlock()
	if ent.program != nil {
		clean, err := ent.program.holds(ctx, input)
		if err != nil {
			return false, fmt.Errorf("fast path: evaluate the residual of clean: %w", err)
		}
		return clean, nil
	}
	opts, stop := evalOptions(ctx, input)
	rs, err := ent.residual.Eval(ctx, opts...)
	stop()
	if err != nil {
		return false, fmt.Errorf("fast path: evaluate the residual of clean: %w", err)
	}
	if len(rs) == 0 {
		return false, nil
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return false, fmt.Errorf("fast path: residual of clean: %d results", len(rs))
	}
	if t, isTerm := rs[0].Expressions[0].Value.(*ast.Term); !isTerm || !ast.Boolean(true).Equal(t.Value) {
		return false, fmt.Errorf("fast path: residual of clean is %v, not true", rs[0].Expressions[0].Value)
	}
	return true, nil
}

// knownInput is the part of the input that key fixes.
func knownInput(key fastKey) ast.Object {
	known := ast.NewObject([2]*ast.Term{kRef, ast.StringTerm(key.ref)})
	if key.org != "" { // as inputValue: an empty field is absent
		known.Insert(ast.StringTerm("org"), ast.StringTerm(key.org))
	}
	if key.biome != "" {
		known.Insert(ast.StringTerm("biome"), ast.StringTerm(key.biome))
	}
	return known
}

// prepare partially evaluates clean and clean_decision for key.
func (f *fastPath) prepare(ctx context.Context, key fastKey) (*fastEntry, error) {
	known := knownInput(key)
	q, err := f.queries()
	if err != nil {
		return nil, err
	}
	dec, err := q.decision.Partial(ctx, rego.EvalParsedInput(known))
	if err != nil {
		return nil, fmt.Errorf("fast path: partially evaluate clean_decision for %s: %w", key.ref, err)
	}
	d, constant, err := constantDecision(dec)
	if err != nil || !constant {
		return &fastEntry{}, err
	}
	ent := &fastEntry{decision: d}
	pq, err := q.clean.Partial(ctx, rego.EvalParsedInput(known))
	if err != nil {
		return nil, fmt.Errorf("fast path: partially evaluate clean for %s: %w", key.ref, err)
	}
	if len(pq.Queries) == 0 {
		ent.neverClean = true
		return ent, nil
	}
	mods := residualModules(pq, "clean_residual", ast.BooleanTerm(true))
	if ent.program, err = compileResidualProgram(mods, "clean_residual"); err == nil {
		return ent, nil
	}
	// Outside the program's subset: topdown evaluates the residual.
	if ent.residual, err = f.compileResidual(ctx, "clean_residual", mods, f.refersToRules(mods)); err != nil {
		return nil, fmt.Errorf("fast path: compile the residual of clean for %s: %w", key.ref, err)
	}
	return ent, nil
}

// prepareFull partially evaluates full_decision for key: empty when the residual still
// refers to the policy's rules.
func (f *fastPath) prepareFull(ctx context.Context, key fastKey) (*fullResidual, error) {
	q, err := f.queries()
	if err != nil {
		return nil, err
	}
	pq, err := q.full.Partial(ctx, rego.EvalParsedInput(knownInput(key)))
	if err != nil {
		return nil, fmt.Errorf("fast path: partially evaluate full_decision for %s: %w", key.ref, err)
	}
	mods := residualModules(pq, "full_residual", ast.VarTerm("decision"))
	if len(pq.Queries) == 0 || f.refersToRules(mods) {
		return &fullResidual{}, nil
	}
	if p, err := compileResidualProgram(mods, "full_residual"); err == nil {
		return &fullResidual{program: p}, nil
	}
	// Outside the program's subset: topdown evaluates the residual.
	full, err := f.compileResidual(ctx, "full_residual", mods, false)
	if err != nil {
		return nil, fmt.Errorf("fast path: compile the residual of full_decision for %s: %w", key.ref, err)
	}
	return &fullResidual{q: full}, nil
}

// constantDecision reads clean_decision's partial result: constant only when it is one
// query binding the decision to a ground value, with no condition and no support rule.
func constantDecision(pq *rego.PartialQueries) (d Decision, constant bool, err error) {
	if len(pq.Queries) != 1 || len(pq.Queries[0]) != 1 || len(pq.Support) != 0 {
		return Decision{}, false, nil
	}
	expr := pq.Queries[0][0]
	if !expr.IsEquality() || len(expr.With) != 0 || expr.Negated {
		return Decision{}, false, nil
	}
	v := expr.Operand(1)
	if !v.IsGround() {
		return Decision{}, false, nil
	}
	if d, err = decodeDecision(v.Value); err != nil {
		return Decision{}, false, fmt.Errorf("fast path: decode clean_decision: %w", err)
	}
	return d, true, nil
}

// residualModules make the residual queries the bodies of one rule, name = value (an
// evaluation then gets rule indexing over them), beside the support modules.
func residualModules(pq *rego.PartialQueries, name string, value *ast.Term) []*ast.Module {
	mod := &ast.Module{Package: &ast.Package{Path: residualPath}}
	head := ast.NewHead(ast.Var(name), nil, value)
	for _, body := range pq.Queries {
		if len(body) == 0 { // the query holds for every call of the key
			body = ast.NewBody(ast.NewExpr(ast.BooleanTerm(true)))
		}
		mod.Rules = append(mod.Rules, &ast.Rule{Head: head.Copy(), Body: body, Module: mod})
	}
	return append([]*ast.Module{mod}, pq.Support...)
}

// compileResidual prepares the rule name of mods (residualModules). The policy's modules
// are compiled in only withPolicy (the residual still refers to one of their rules), to
// keep each entry small.
func (f *fastPath) compileResidual(ctx context.Context, name string, mods []*ast.Module, withPolicy bool) (*rego.PreparedEvalQuery, error) {
	opts := []func(*rego.Rego){rego.Query(residualPath.String() + "." + name), rego.Store(f.store)}
	for _, m := range mods {
		// Keyed by their package's file, which support modules may share with the policy's
		// own: without a location each is its own.
		m.Package = &ast.Package{Path: m.Package.Path}
		opts = append(opts, rego.ParsedModule(m))
	}
	if withPolicy {
		for _, m := range f.modules {
			opts = append(opts, rego.ParsedModule(m))
		}
	} else {
		// A compiler's type environment holds every built-in it may call: only those the
		// residual calls keep each entry a fraction of the size.
		opts = append(opts, rego.Capabilities(capabilitiesFor(mods)))
	}
	prepared, err := rego.New(opts...).PrepareForEval(ctx)
	if err != nil {
		return nil, err
	}
	return &prepared, nil
}

// capabilitiesFor are this OPA's capabilities with only the built-ins mods call.
func capabilitiesFor(mods []*ast.Module) *ast.Capabilities {
	used := map[string]bool{ast.Equality.Name: true}
	for _, m := range mods {
		ast.WalkExprs(m, func(x *ast.Expr) bool {
			if x.IsCall() {
				used[x.Operator().String()] = true
			}
			return false
		})
		ast.WalkTerms(m, func(t *ast.Term) bool {
			if c, ok := t.Value.(ast.Call); ok {
				used[c[0].String()] = true
			}
			return false
		})
	}
	caps := *allCapabilities
	caps.Builtins = nil
	for _, b := range allCapabilities.Builtins {
		if used[b.Name] {
			caps.Builtins = append(caps.Builtins, b)
		}
	}
	return &caps
}

// refersToRules reports whether mods refer to a package of the policy's own modules.
func (f *fastPath) refersToRules(mods []*ast.Module) bool {
	found := false
	for _, m := range mods {
		ast.WalkRefs(m, func(r ast.Ref) bool {
			for _, pm := range f.modules {
				if r.HasPrefix(pm.Package.Path) {
					found = true
				}
			}
			return found
		})
	}
	return found
}
