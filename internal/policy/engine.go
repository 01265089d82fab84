// Package policy evaluates the Rego of policies/ in-process: it compiles a bundle (the
// policies, optional platform Rego and the data.xema document), prepares one query, swaps it
// atomically when data changes, serves the same bundle to stock OPA and runs `opa test`.
package policy

import (
	"bytes"
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
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/util"

	"github.com/xemahq/xema/policies"
)

// Query is the one decision every call evaluates.
const Query = "data.xema.authz.decision"

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
}

// Engine decides calls with the serving bundle. Safe for concurrent use.
type Engine struct {
	extraDir string
	// mu serializes Load and ReloadExtra; modules, extraSig, data and loaded are under it.
	mu       sync.Mutex
	modules  []module
	extraSig string
	data     map[string]any
	loaded   bool
	serving  atomic.Pointer[compiled]
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
	query    rego.PreparedEvalQuery
	revision string
	tarGz    []byte
	etag     string
}

// New parses the embedded policies and the Rego of opts.ExtraDir. No bundle serves until Load.
func New(ctx context.Context, opts Options) (*Engine, error) {
	e := &Engine{extraDir: opts.ExtraDir}
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
	mods, err := readModules(policies.FS(), "policies", false)
	if err != nil {
		return nil, err
	}
	if e.extraDir == "" {
		return mods, nil
	}
	extra, err := readModules(os.DirFS(e.extraDir), "custom", false)
	if err != nil {
		return nil, fmt.Errorf("platform policy dir %s: %w", e.extraDir, err)
	}
	for _, m := range extra {
		if err := checkPlatformModule(m.path, m.parsed); err != nil {
			return nil, err
		}
	}
	return append(mods, extra...), nil
}

// readModules parses every .rego file of fsys (tests only when withTests), naming each
// prefix/path.
func readModules(fsys fs.FS, prefix string, withTests bool) ([]module, error) {
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
		name := filepath.ToSlash(filepath.Join(prefix, p))
		parsed, err := ast.ParseModuleWithOpts(name, string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return fmt.Errorf("parse %s: %w", name, err)
		}
		mods = append(mods, module{path: name, source: string(src), parsed: parsed})
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
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.compile(ctx, e.modules, data, revision); err != nil {
		return err
	}
	e.data, e.loaded = data, true
	return nil
}

// compile builds and swaps in the bundle of mods over data; on error nothing changes.
func (e *Engine) compile(ctx context.Context, mods []module, data map[string]any, revision string) error {
	doc := make(map[string]any, len(data)+1)
	for k, v := range data {
		doc[k] = v
	}
	doc["revision"] = revision
	dataJSON, err := json.Marshal(map[string]any{"xema": doc})
	if err != nil {
		return fmt.Errorf("policy: load revision %s: encode data: %w", revision, err)
	}
	// The store is built from the same bytes the bundle carries, so both decide alike.
	var normalized map[string]any
	if err := util.UnmarshalJSON(dataJSON, &normalized); err != nil {
		return fmt.Errorf("policy: load revision %s: decode data: %w", revision, err)
	}
	store := inmem.NewFromObjectWithOpts(normalized,
		inmem.OptRoundTripOnWrite(false), inmem.OptReturnASTValuesOnRead(true))

	opts := []func(*rego.Rego){rego.Query(Query), rego.Store(store)}
	for _, m := range mods {
		opts = append(opts, rego.ParsedModule(m.parsed))
	}
	pq, err := rego.New(opts...).PrepareForEval(ctx)
	if err != nil {
		return fmt.Errorf("policy: compile revision %s: %w", revision, err)
	}
	tarGz, etag, err := writeBundle(revision, dataJSON, mods)
	if err != nil {
		return fmt.Errorf("policy: bundle revision %s: %w", revision, err)
	}
	e.serving.Store(&compiled{query: pq, revision: revision, tarGz: tarGz, etag: etag})
	return nil
}

// Decide evaluates the serving bundle for one call. Any error means deny (fail closed).
func (e *Engine) Decide(ctx context.Context, in Input) (Decision, error) {
	c := e.serving.Load()
	if c == nil {
		return Decision{}, ErrNoBundle
	}
	rs, err := c.query.Eval(ctx, rego.EvalParsedInput(inputValue(in)))
	if err != nil {
		return Decision{}, fmt.Errorf("policy: evaluate %s (revision %s): %w", in.Ref, c.revision, err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return Decision{}, fmt.Errorf("policy: evaluate %s (revision %s): decision undefined", in.Ref, c.revision)
	}
	raw, err := json.Marshal(rs[0].Expressions[0].Value)
	if err != nil {
		return Decision{}, fmt.Errorf("policy: encode decision for %s: %w", in.Ref, err)
	}
	var d Decision
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return Decision{}, fmt.Errorf("policy: decode decision for %s: %w", in.Ref, err)
	}
	return d, nil
}

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
