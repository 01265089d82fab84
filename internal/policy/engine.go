// Package policy evaluates the Rego of policies/ in-process: it compiles a bundle (the
// policies, optional platform Rego and the data.xema document), prepares one query, swaps it
// atomically when data changes, serves the same bundle to stock OPA and runs `opa test`.
package policy

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/util"

	"github.com/xemahq/xema/policies"
)

// Query is the one decision every call evaluates.
const Query = "data.xema.authz.decision"

// fullQuery is Query for a call the fast path found not clean (authz.rego).
const fullQuery = "data.xema.authz.full_decision"

// customPackage is where platform Rego must live: inside the bundle root, beside authz.
var customPackage = ast.MustParseRef("data.xema.custom")

// reservedDataKeys are packages under data.xema: data must not shadow them.
var reservedDataKeys = []string{"authz", "custom"}

// ErrNoBundle is returned by Decide before any bundle has been loaded; callers deny.
var ErrNoBundle = errors.New("policy: no bundle loaded")

// Options configure an Engine.
type Options struct {
	// ExtraDir holds platform Rego (package xema.custom); its deny rules join the decision.
	ExtraDir string
	// DecisionCacheSize bounds the decision cache (entries): 0 means
	// DefaultDecisionCacheSize, a negative size turns it off. The cache is off by itself
	// while the policy calls a non-deterministic built-in (see CacheStats).
	DecisionCacheSize int
}

// Engine decides calls with the serving bundle. Safe for concurrent use.
type Engine struct {
	extraDir  string
	cacheSize int
	// mu serializes Load and ReloadExtra; modules, extraSig, data and loaded are under it.
	mu       sync.Mutex
	modules  []module
	extraSig string
	dataJSON []byte
	// dataRev is the revision of the loaded data; the serving revision adds the platform
	// Rego's (servingRevision).
	dataRev string
	loaded  bool
	serving atomic.Pointer[compiled]
	// codes are the reason codes the modules' deny rules can emit (ReasonCodes).
	codes atomic.Pointer[map[string]bool]
}

// module is one Rego file of the bundle, by its path inside the bundle.
type module struct {
	path   string
	source string
	parsed *ast.Module
}

// compiled is one loaded bundle: the prepared query and the same bundle as bytes.
type compiled struct {
	query rego.PreparedEvalQuery
	// full is fullQuery, prepared when fast is not nil.
	full     rego.PreparedEvalQuery
	store    storage.Store
	revision string
	tarGz    []byte
	etag     string
	// cache is nil when off; cacheOff says why.
	cache    *decisionCache
	cacheOff string
	// fast decides clean calls from residuals (fast.go); nil while the policy calls a
	// non-deterministic built-in, whose answer partial evaluation would fix once.
	fast *fastPath
	// mods are the bundle's modules; searchable is prepared over them on first use.
	mods       []module
	searchable searchableQuery
	// own: mods are the embedded policies plus platform Rego (ownPolicy).
	own bool
}

// newCompiled stamps a prepared query over store with a decision cache and a fast path of
// its own when allowed.
func (e *Engine) newCompiled(ctx context.Context, pq rego.PreparedEvalQuery, store storage.Store, revision string, mods []module) (*compiled, error) {
	c := &compiled{query: pq, store: store, revision: revision, mods: mods, own: ownPolicy(mods)}
	parsed := make([]*ast.Module, len(mods))
	for i, m := range mods {
		parsed[i] = m.parsed
	}
	nd := nondeterministicBuiltins(parsed)
	switch {
	case e.cacheSize < 0:
		c.cacheOff = "turned off"
	case len(nd) > 0:
		c.cacheOff = "the policy calls non-deterministic built-ins: " + strings.Join(nd, ", ")
	default:
		c.cache = newDecisionCache(cmp.Or(e.cacheSize, DefaultDecisionCacheSize))
	}
	if len(nd) > 0 || !c.own {
		return c, nil
	}
	full, err := prepare(ctx, fullQuery, store, mods)
	if err != nil {
		return nil, fmt.Errorf("prepare %s: %w", fullQuery, err)
	}
	c.full, c.fast = full, newFastPath(parsed, store)
	return c, nil
}

// ownPolicy reports whether mods are the embedded policies, unchanged, plus platform Rego
// (package xema.custom): the fast path relies on their decision being clean_decision
// whenever clean holds, which a bundle's other Rego need not keep.
func ownPolicy(mods []module) bool {
	own := embeddedSources()
	matched := 0
	for _, m := range mods {
		src, ok := own[strings.TrimPrefix(m.path, "/")]
		switch {
		case ok && src == m.source:
			matched++
		case !m.parsed.Package.Path.HasPrefix(customPackage):
			return false
		}
	}
	return matched == len(own)
}

// embeddedSources are the embedded policies' sources by their path in a bundle.
var embeddedSources = sync.OnceValue(func() map[string]string {
	mods, err := readModules(policies.FS(), "policies", "policies", false)
	if err != nil {
		panic(fmt.Sprintf("policy: embedded policies: %v", err)) // New would have failed first
	}
	out := make(map[string]string, len(mods))
	for _, m := range mods {
		out[m.path] = m.source
	}
	return out
})

// CacheStats reports the decision cache of the serving bundle (zero before the first Load).
func (e *Engine) CacheStats() CacheStats {
	c := e.serving.Load()
	switch {
	case c == nil:
		return CacheStats{}
	case c.cache == nil:
		return CacheStats{Reason: c.cacheOff}
	}
	return c.cache.stats()
}

// New parses the embedded policies and the Rego of opts.ExtraDir. No bundle serves until Load.
func New(ctx context.Context, opts Options) (*Engine, error) {
	e := &Engine{extraDir: opts.ExtraDir, cacheSize: opts.DecisionCacheSize}
	sig, err := e.signature()
	if err != nil {
		return nil, err
	}
	mods, err := e.readAll()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e.modules, e.extraSig = mods, sig
	e.setCodes(mods)
	return e, nil
}

// readAll parses the embedded policies and the platform Rego of the extra dir.
func (e *Engine) readAll() ([]module, error) {
	mods, err := readModules(policies.FS(), "policies", "policies", false)
	if err != nil {
		return nil, err
	}
	if e.extraDir == "" {
		return mods, nil
	}
	extra, err := readModules(os.DirFS(e.extraDir), "custom", e.extraDir, false)
	if err != nil {
		return nil, fmt.Errorf("platform policy dir %s: %w", e.extraDir, err)
	}
	for _, m := range extra {
		if err := checkPlatformModule(m.parsed.Package.Location.File, m.parsed); err != nil {
			return nil, err
		}
	}
	return append(mods, extra...), nil
}

// readModules parses every .rego file of fsys (tests only when withTests), naming each
// prefix/path in the bundle and dir/path in errors: dir is where the operator finds the file
// (a platform policy's own path, not the bundle's custom/ name).
func readModules(fsys fs.FS, prefix, dir string, withTests bool) ([]module, error) {
	var mods []module
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".rego") || (!withTests && policies.IsTest(p)) {
			return nil
		}
		src, err := fs.ReadFile(fsys, p)
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		name, file := filepath.ToSlash(filepath.Join(prefix, p)), filepath.Join(dir, p)
		parsed, err := ast.ParseModuleWithOpts(file, string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return fmt.Errorf("parse %s: %w", file, err)
		}
		m, err := withGlobsOutOfIndex(module{path: name, source: string(src), parsed: parsed})
		if err != nil {
			return err
		}
		mods = append(mods, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].path < mods[j].path })
	return mods, nil
}

// Load compiles a bundle of the policies and data (the data.xema document) stamped with
// revision, and makes it the serving one. On any error the serving bundle stays.
func (e *Engine) Load(ctx context.Context, data map[string]any, revision string) error {
	if revision == "" {
		return errors.New("policy: load: empty revision")
	}
	for _, k := range reservedDataKeys {
		if _, ok := data[k]; ok {
			return fmt.Errorf("policy: load: data.xema.%s is reserved for policy packages", k)
		}
	}
	doc := make(map[string]any, len(data)+1)
	for k, v := range data {
		doc[k] = v
	}
	doc["revision"] = revision
	dataJSON, err := json.Marshal(map[string]any{"xema": doc})
	if err != nil {
		return fmt.Errorf("policy: load revision %s: encode data: %w", revision, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.compile(ctx, e.modules, dataJSON, revision); err != nil {
		return err
	}
	// The encoded document, not the caller's map, is kept for recompiling with changed Rego:
	// a fraction of the map's memory (at 100,000 grants ~1/6: tens of MB, not hundreds).
	e.dataJSON, e.dataRev, e.loaded = dataJSON, revision, true
	return nil
}

// compile builds and swaps in the bundle of mods over dataJSON (the encoded {"xema": ...}
// document); on error nothing changes.
func (e *Engine) compile(ctx context.Context, mods []module, dataJSON []byte, dataRev string) error {
	revision := servingRevision(dataRev, mods)
	// The store is built from the same bytes the bundle carries, so both decide alike.
	var normalized map[string]any
	if err := util.UnmarshalJSON(dataJSON, &normalized); err != nil {
		return fmt.Errorf("policy: load revision %s: decode data: %w", revision, err)
	}
	if doc, ok := normalized["xema"].(map[string]any); ok {
		doc["revision"] = revision // decisions name the serving revision, platform Rego included
	}
	store := inmem.NewFromObjectWithOpts(normalized,
		inmem.OptRoundTripOnWrite(false), inmem.OptReturnASTValuesOnRead(true))

	pq, err := prepare(ctx, Query, store, mods)
	if err != nil {
		return fmt.Errorf("policy: compile revision %s: %w", revision, err)
	}
	tarGz, etag, err := writeBundle(revision, dataJSON, mods)
	if err != nil {
		return fmt.Errorf("policy: bundle revision %s: %w", revision, err)
	}
	c, err := e.newCompiled(ctx, pq, store, revision, mods)
	if err != nil {
		return fmt.Errorf("policy: compile revision %s: %w", revision, err)
	}
	c.tarGz, c.etag = tarGz, etag
	e.swap(c)
	return nil
}

// swap makes c the serving bundle. The keys the previous one served are prepared for c in
// the background, the most recently used first; its own preparations stop.
func (e *Engine) swap(c *compiled) {
	prev := e.serving.Swap(c)
	if prev == nil || prev.fast == nil {
		return
	}
	prev.fast.retire()
	if c.fast != nil {
		c.fast.seed(prev.fast.recent(seedKeys))
	}
}

// prepare compiles query over mods and store.
func prepare(ctx context.Context, query string, store storage.Store, mods []module) (rego.PreparedEvalQuery, error) {
	opts := []func(*rego.Rego){rego.Query(query), rego.Store(store)}
	for _, m := range mods {
		opts = append(opts, rego.ParsedModule(m.parsed))
	}
	return rego.New(opts...).PrepareForEval(ctx)
}

// Decide evaluates the serving bundle for one call. Any error means deny (fail closed).
func (e *Engine) Decide(ctx context.Context, in Input) (Decision, error) {
	c := e.serving.Load()
	if c == nil {
		return Decision{}, ErrNoBundle
	}
	if c.cache == nil {
		return c.decide(ctx, in)
	}
	key := cacheKey(in)
	if d, ok := c.cache.get(key); ok {
		return d, nil
	}
	d, err := c.decide(ctx, in)
	if err == nil {
		c.cache.put(key, d)
	}
	return d, err
}

// decide decides a call without the decision cache: by OPA's evaluation of the key's
// prepared residuals when they are ready, else by evaluating the policy in full.
func (c *compiled) decide(ctx context.Context, in Input) (Decision, error) {
	input := inputValue(in)
	if c.fast == nil {
		return c.evaluate(ctx, c.query, in.Ref, input)
	}
	d, out, err := c.fast.decide(ctx, in, input)
	switch {
	case err != nil:
		return Decision{}, fmt.Errorf("policy: decide %s (revision %s): %w", in.Ref, c.revision, err)
	case out == decidedClean || out == decidedFull:
		c.fast.counted(true)
		return d, nil
	}
	c.fast.counted(false)
	if out == notClean { // decision is full_decision: clean need not be evaluated again
		return c.evaluate(ctx, c.full, in.Ref, input)
	}
	return c.evaluate(ctx, c.query, in.Ref, input)
}

// evaluate evaluates a prepared decision query in full for the call of ref.
func (c *compiled) evaluate(ctx context.Context, q rego.PreparedEvalQuery, ref string, input ast.Value) (Decision, error) {
	d, err := evaluateDecision(ctx, q, input)
	if err != nil {
		return Decision{}, fmt.Errorf("policy: decision for %s (revision %s): %w", ref, c.revision, err)
	}
	return d, nil
}

// evaluateDecision evaluates a query whose one result is a decision and decodes it.
func evaluateDecision(ctx context.Context, q rego.PreparedEvalQuery, input ast.Value) (Decision, error) {
	opts, stop := evalOptions(ctx, input)
	rs, err := q.Eval(ctx, opts...)
	stop()
	if err != nil {
		return Decision{}, fmt.Errorf("evaluate: %w", err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return Decision{}, errors.New("decision undefined")
	}
	t, ok := rs[0].Expressions[0].Value.(*ast.Term)
	if !ok {
		return Decision{}, fmt.Errorf("decision is %T, not an AST term", rs[0].Expressions[0].Value)
	}
	d, err := decodeDecision(t.Value)
	if err != nil {
		return Decision{}, fmt.Errorf("decode decision: %w", err)
	}
	return d, nil
}

// keepTerm hands the result back as the AST term OPA computed: Decide reads it directly
// instead of converting it to map[string]any, encoding that to JSON and decoding the JSON.
func keepTerm(t *ast.Term, _ *rego.EvalContext) (any, error) { return t, nil }

// noMetrics: Decide reads no evaluation metrics, so none are kept.
var noMetrics = metrics.NoOp()

// fixedOptions are the options every evaluation shares, built once (each is a closure:
// built per call they were seven allocations): the result as an AST term, no metrics and
// no instrumentation, rule indexing and early exit on.
var fixedOptions = []rego.EvalOption{
	rego.EvalGenerateJSON(keepTerm), rego.EvalMetrics(noMetrics),
	rego.EvalInstrument(false), rego.EvalRuleIndexing(true), rego.EvalEarlyExit(true),
}

// noCancel is the cancel option of an evaluation whose context can never be cancelled.
var noCancel = rego.EvalExternalCancel(neverCancel{})

// evalOptions are the options of one evaluation: fixedOptions and the input as an AST
// value. Cancellation follows ctx through context.AfterFunc when ctx can be cancelled
// (rather than the goroutine per evaluation OPA starts otherwise).
// stop releases the AfterFunc once the evaluation has returned.
func evalOptions(ctx context.Context, input ast.Value) (opts []rego.EvalOption, stop func() bool) {
	opts = append(make([]rego.EvalOption, 0, len(fixedOptions)+2), fixedOptions...)
	opts = append(opts, rego.EvalParsedInput(input))
	if ctx.Done() == nil {
		return append(opts, noCancel), noStop
	}
	c := topdown.NewCancel()
	return append(opts, rego.EvalExternalCancel(c)), context.AfterFunc(ctx, c.Cancel)
}

func noStop() bool { return false }

// neverCancel is the cancel of an evaluation whose context can never be cancelled.
type neverCancel struct{}

func (neverCancel) Cancel()         {}
func (neverCancel) Cancelled() bool { return false }

// Revision is the serving bundle's revision, empty before the first Load.
func (e *Engine) Revision() string {
	if c := e.serving.Load(); c != nil {
		return c.revision
	}
	return ""
}

// Bundle returns the serving bundle in OPA's format (gzipped tar) and its ETag (quoted);
// nil and "" before the first Load.
func (e *Engine) Bundle() (tarGz []byte, etag string) {
	if c := e.serving.Load(); c != nil {
		return c.tarGz, c.etag
	}
	return nil, ""
}
