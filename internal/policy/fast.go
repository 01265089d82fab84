package policy

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"

	"github.com/xemahq/xema/internal/telemetry"
)

// fastPathSize bounds the keys (ref, org, biome) one bundle keeps residuals for. A key's
// residual of clean, compiled for topdown, holds ~80 KB at the benchmark's data, its
// residual of full_decision ~270 KB.
const fastPathSize = 1024

// fullResidualsKept bounds the residuals of full_decision one bundle makes: past that, a
// key's calls that are not clean are decided by full_decision in full.
const fullResidualsKept = 320

// seedKeys bounds the keys a new bundle prepares for the traffic of the one it replaces
// (the most recently used first): each costs ~10-20 ms of one core in the background.
const seedKeys = 256

// churnPause spaces the preparations once fastPathSize keys are held (each evicts one):
// traffic over more keys than that then costs a bounded share of one core.
const churnPause = 100 * time.Millisecond

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
	// evaluated every deny rule again).
	keptWhole = []string{"data.xema.authz.clean_subject_covered", "data.xema.authz.deny"}
	// allCapabilities are built once: CapabilitiesForThisVersion builds them on every call.
	allCapabilities = ast.CapabilitiesForThisVersion()
)

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

// fastPath decides calls by OPA's evaluation of residuals that OPA's partial evaluation
// made per key (ref, org, biome), in the background. For a key it partially evaluates
// data.xema.authz.clean with the key's input fields known and the others unknown, and
// data.xema.authz.clean_decision, which must then be a constant (authz.rego: decision is
// clean_decision whenever clean holds); after the key's first call that is not clean, also
// data.xema.authz.full_decision. A call of a key without its residual is decided by the
// full evaluation and asks for it: a call never waits for partial evaluation. One fastPath
// belongs to one compiled bundle, so a new revision starts empty (seeded with the keys the
// previous one served).
type fastPath struct {
	// modules are the bundle's, for compiling a residual that still refers to their rules.
	modules []*ast.Module
	// store is the bundle's store, which residuals are evaluated over; partial evaluation
	// reads it through copyingStore.
	store storage.Store
	// queries compiles the partial queries, once, in the first preparation.
	queries func() (fastQueries, error)
	// entries are the prepared keys: read without a lock by every call, replaced (copied)
	// only by the worker.
	entries atomic.Pointer[map[fastKey]*fastEntry]
	// clock orders uses: the worker prepares the most recently wanted key first and evicts
	// the least recently used.
	clock atomic.Uint64
	// byResidual and byFull count the decisions by the path that made them.
	byResidual, byFull atomic.Uint64

	mu sync.Mutex
	// wanted are the keys calls asked residuals for, with the clock of the last ask.
	wanted map[fastKey]wish
	// working: a worker goroutine runs (at most one a bundle); retired: the bundle no longer
	// serves, its worker stops.
	working, retired bool
	// fullMade counts the residuals of full_decision made, at most fullLimit.
	fullMade, fullLimit int
	// pause spaces preparations once the entries are full (churnPause); 0, in tests (set
	// while the worker runs, hence atomic), also turns rest off.
	pause atomic.Int64
	// idle is closed when the worker has nothing left to do (tests wait on it).
	idle chan struct{}
}

type fastQueries struct{ clean, decision, full rego.PreparedPartialQuery }

type fastKey struct{ ref, org, biome string }

// wish is what calls of a key asked for: its entry, or (full) its residual of full_decision.
type wish struct {
	at   uint64
	full bool
}

// fastEntry is what partial evaluation left for one key.
type fastEntry struct {
	// clean is topdown's query of the residual of clean; nil when clean_decision is not a
	// constant (every call of the key evaluates decision) or clean never holds (neverClean).
	clean      *rego.PreparedEvalQuery
	neverClean bool
	decision   Decision
	// full is the residual of full_decision, made after the key's first call that is not
	// clean; its q is nil when the residual still refers to the policy's rules or could
	// not be made: full_decision then decides in full.
	full atomic.Pointer[fullResidual]
	used atomic.Uint64
}

type fullResidual struct{ q *rego.PreparedEvalQuery }

func newFastPath(mods []*ast.Module, store storage.Store) *fastPath {
	f := &fastPath{modules: mods, store: store, wanted: map[fastKey]wish{},
		fullLimit: fullResidualsKept, idle: make(chan struct{})}
	f.pause.Store(int64(churnPause))
	f.entries.Store(&map[fastKey]*fastEntry{})
	close(f.idle)
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
		rego.Query(query), rego.Store(copyingStore{f.store}), rego.Unknowns(unknownInputs),
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
	decidedClean                // the residual of clean holds: the decision is the key's clean_decision
	decidedFull                 // clean does not hold: decided by the key's residual of full_decision
	notClean                    // clean does not hold: the decision is full_decision
)

// decide tells whether the call (in, and input, its input document) is clean, with its
// decision when it is or when the key's residual of full_decision decided it. It never
// waits for partial evaluation. An error is an error of the decision: the caller denies.
func (f *fastPath) decide(ctx context.Context, in Input, input ast.Value) (Decision, outcome, error) {
	key := fastKey{ref: in.Ref, org: in.Org, biome: in.Biome}
	ent := (*f.entries.Load())[key]
	if ent == nil {
		f.want(key, false)
		return Decision{}, undecided, nil
	}
	ent.used.Store(f.clock.Add(1))
	switch {
	case ent.neverClean:
	case ent.clean == nil:
		return Decision{}, undecided, nil
	default:
		clean, err := holds(ctx, ent.clean, input)
		switch {
		case err != nil:
			return Decision{}, undecided, err
		case clean:
			return ent.decision.clone(), decidedClean, nil
		}
	}
	full := ent.full.Load()
	if full == nil {
		f.want(key, true)
		return Decision{}, notClean, nil
	}
	if full.q == nil {
		return Decision{}, notClean, nil
	}
	d, err := evaluateDecision(ctx, *full.q, input)
	if err != nil {
		return Decision{}, undecided, fmt.Errorf("fast path: residual of full_decision: %w", err)
	}
	return d, decidedFull, nil
}

// counted records which path decided a call (the metric and the counters tests read).
func (f *fastPath) counted(residual bool) {
	if residual {
		f.byResidual.Add(1)
	} else {
		f.byFull.Add(1)
	}
	telemetry.PolicyEvaluation(residual)
}

// want asks the worker for key's entry, or (full) for its residual of full_decision, and
// starts the worker when none runs. Never blocks on a preparation.
func (f *fastPath) want(key fastKey, full bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.retired || (full && f.fullMade >= f.fullLimit) {
		return
	}
	w := f.wanted[key]
	w.at, w.full = f.clock.Add(1), w.full || full
	f.wanted[key] = w
	if len(f.wanted) > fastPathSize { // the least recently wanted key waits for its next call
		oldest := key
		for k, v := range f.wanted {
			if v.at < f.wanted[oldest].at {
				oldest = k
			}
		}
		delete(f.wanted, oldest)
	}
	if !f.working {
		f.working, f.idle = true, make(chan struct{})
		go f.work()
	}
}

// work prepares the wanted keys, the most recently wanted first, until none is left or the
// bundle is retired. One worker a bundle: partial evaluation takes at most one core.
func (f *fastPath) work() {
	ctx := context.Background() // a preparation belongs to no call
	for {
		key, w, ok := f.next()
		if !ok {
			return
		}
		ent := (*f.entries.Load())[key]
		if ent == nil {
			if pause := time.Duration(f.pause.Load()); f.crowded() && pause > 0 {
				time.Sleep(pause)
			}
			var err error
			start := time.Now()
			ent, err = f.prepare(ctx, key)
			f.rest(start)
			if err != nil {
				// The fast path is an optimisation: a key it cannot prepare is decided in
				// full, never denied for it.
				slog.Warn("policy fast path: key left to the full evaluation", "ref", key.ref, "org", key.org, "err", err)
				ent = &fastEntry{}
			}
			ent.used.Store(w.at)
			f.add(key, ent)
		}
		if w.full && ent.full.Load() == nil {
			start := time.Now()
			fr, err := f.prepareFull(ctx, key)
			f.rest(start)
			if err != nil {
				slog.Warn("policy fast path: full_decision left to the full evaluation", "ref", key.ref, "org", key.org, "err", err)
				fr = &fullResidual{}
			}
			ent.full.Store(fr)
		}
	}
}

// rest sleeps as long as a preparation begun at start took, so the worker takes at most half of one core:
// calls meanwhile decided in full cost less than the CPU partial evaluation would take from
// them (a key's first calls ran 4× slower in the funnel beside a worker preparing without
// pause on 2 cores).
func (f *fastPath) rest(start time.Time) {
	if f.pause.Load() > 0 {
		time.Sleep(time.Since(start))
	}
}

// next takes the most recently wanted key; ok is false (and the worker stops) when there is
// none or the bundle is retired.
func (f *fastPath) next() (key fastKey, w wish, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.retired || len(f.wanted) == 0 {
		f.working = false
		close(f.idle)
		return key, w, false
	}
	for k, v := range f.wanted {
		if !ok || v.at > w.at {
			key, w, ok = k, v, true
		}
	}
	delete(f.wanted, key)
	if w.full {
		if f.fullMade >= f.fullLimit {
			w.full = false
		} else {
			f.fullMade++
		}
	}
	return key, w, true
}

func (f *fastPath) crowded() bool { return len(*f.entries.Load()) >= fastPathSize }

// add publishes ent for key, evicting the least recently used entry when full. Only the
// worker writes entries.
func (f *fastPath) add(key fastKey, ent *fastEntry) {
	old := *f.entries.Load()
	next := make(map[fastKey]*fastEntry, len(old)+1)
	maps.Copy(next, old)
	if len(next) >= fastPathSize {
		var lru fastKey
		var at uint64
		first := true
		for k, e := range next {
			if u := e.used.Load(); first || u < at {
				lru, at, first = k, u, false
			}
		}
		delete(next, lru)
	}
	next[key] = ent
	f.entries.Store(&next)
}

// recent are the keys f served and was asked for, the most recently used first, at most n;
// full marks those that had (or wanted) a residual of full_decision.
func (f *fastPath) recent(n int) (keys []fastKey, full map[fastKey]bool) {
	type use struct {
		key  fastKey
		at   uint64
		full bool
	}
	var uses []use
	for k, e := range *f.entries.Load() {
		uses = append(uses, use{k, e.used.Load(), e.full.Load() != nil})
	}
	f.mu.Lock()
	for k, w := range f.wanted {
		uses = append(uses, use{k, w.at, w.full})
	}
	f.mu.Unlock()
	slices.SortFunc(uses, func(a, b use) int { return cmp.Compare(b.at, a.at) })
	full = map[fastKey]bool{}
	seen := map[fastKey]bool{}
	for _, u := range uses {
		if len(keys) == n {
			break
		}
		if !seen[u.key] {
			seen[u.key] = true
			keys = append(keys, u.key)
		}
		full[u.key] = full[u.key] || u.full
	}
	return keys, full
}

// seed asks for the keys the previous bundle served (recent's order: the first is the most
// recent, and is prepared first).
func (f *fastPath) seed(keys []fastKey, full map[fastKey]bool) {
	for i := len(keys) - 1; i >= 0; i-- {
		f.want(keys[i], full[keys[i]])
	}
}

// retire stops the worker: the bundle no longer serves.
func (f *fastPath) retire() {
	f.mu.Lock()
	f.retired = true
	f.mu.Unlock()
}

// waitIdle waits until the worker has prepared every wanted key, or ctx ends.
func (f *fastPath) waitIdle(ctx context.Context) error {
	for {
		f.mu.Lock()
		idle := f.idle
		f.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
		f.mu.Lock()
		done := !f.working
		f.mu.Unlock()
		if done {
			return nil
		}
	}
}

// WaitPrepared waits until the serving bundle's background preparation has nothing left to
// do, or ctx ends: a benchmark's warm calls follow it.
func (e *Engine) WaitPrepared(ctx context.Context) error {
	c := e.serving.Load()
	if c == nil || c.fast == nil {
		return nil
	}
	return c.fast.waitIdle(ctx)
}

// holds evaluates a residual of clean.
func holds(ctx context.Context, q *rego.PreparedEvalQuery, input ast.Value) (bool, error) {
	opts, stop := evalOptions(ctx, input)
	rs, err := q.Eval(ctx, opts...)
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
	if ent.clean, err = f.compileResidual(ctx, "clean_residual", mods, f.refersToRules(mods)); err != nil {
		return nil, fmt.Errorf("fast path: compile the residual of clean for %s: %w", key.ref, err)
	}
	return ent, nil
}

// prepareFull partially evaluates full_decision for key: no query when the residual still
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
// evaluation then gets rule indexing over them), beside the support modules. They are
// copies: partial evaluation keeps no term of theirs.
func residualModules(pq *rego.PartialQueries, name string, value *ast.Term) []*ast.Module {
	mod := &ast.Module{Package: &ast.Package{Path: residualPath}}
	head := ast.NewHead(ast.Var(name), nil, value)
	for _, body := range pq.Queries {
		if len(body) == 0 { // the query holds for every call of the key
			body = ast.NewBody(ast.NewExpr(ast.BooleanTerm(true)))
		}
		mod.Rules = append(mod.Rules, &ast.Rule{Head: head.Copy(), Body: body.Copy(), Module: mod})
	}
	mods := []*ast.Module{mod}
	for _, m := range pq.Support {
		mods = append(mods, m.Copy())
	}
	for _, m := range mods {
		keepGlobsOutOfIndex(m) // a grant's resource globs are constants here
	}
	return mods
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

// copyingStore is the bundle's store as partial evaluation reads it: every value read is a
// deep copy. OPA's copy propagation, which partial evaluation runs, writes back into the
// terms it plugs (ast.Transform stores each child term's value again); on terms of the
// shared store that would race with every evaluation reading them. A copy per read keeps
// partial evaluation off the terms evaluation reads, without a second copy of the data
// or a lock on the request path (TestPreparationBesideDecisions runs both under -race).
type copyingStore struct{ storage.Store }

func (s copyingStore) Read(ctx context.Context, txn storage.Transaction, path storage.Path) (any, error) {
	v, err := s.Store.Read(ctx, txn, path)
	if err != nil {
		return nil, err
	}
	if av, ok := v.(ast.Value); ok {
		return ast.CopyValue(av), nil
	}
	return v, nil
}

// NonEmpty is the store's own (no copy): compiling checks every rule's path with it, and
// without it OPA reads (here: copies) each path's prefixes, data.xema whole among them.
func (s copyingStore) NonEmpty(ctx context.Context, txn storage.Transaction) func([]string) (bool, error) {
	return storage.NonEmpty(ctx, s.Store, txn)
}
