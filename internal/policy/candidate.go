package policy

import (
	"context"
	"fmt"
	"io"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// WithData returns a new engine deciding with e's policies over data (a dry run: the
// serving engine is untouched).
func (e *Engine) WithData(ctx context.Context, data map[string]any, revision string) (*Engine, error) {
	c := &Engine{modules: e.modules, cacheSize: e.cacheSize}
	if err := c.Load(ctx, data, revision); err != nil {
		return nil, err
	}
	return c, nil
}

// FromBundle returns an engine deciding with a whole bundle in OPA's format (gzipped tar of
// Rego and data.json, as GET /v1/bundles/xema.tar.gz serves or `opa build` writes). Its
// policy must define data.xema.authz.decision.
func FromBundle(ctx context.Context, r io.Reader) (*Engine, error) {
	b, err := bundle.NewReader(r).WithRegoVersion(ast.RegoV1).Read()
	if err != nil {
		return nil, fmt.Errorf("policy: read bundle: %w", err)
	}
	store := inmem.NewFromObject(b.Data)
	opts := []func(*rego.Rego){rego.Query(Query), rego.Store(store)}
	mods := make([]module, 0, len(b.Modules))
	for _, bm := range b.Modules {
		// A bundle written before the gateway kept globs out of OPA's index decides as the
		// gateway does now (globindex.go).
		m, err := withGlobsOutOfIndex(module{path: bm.Path, source: string(bm.Raw), parsed: bm.Parsed})
		if err != nil {
			return nil, fmt.Errorf("policy: read bundle: %w", err)
		}
		opts = append(opts, rego.ParsedModule(m.parsed))
		mods = append(mods, m)
	}
	pq, err := rego.New(opts...).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("policy: compile bundle: %w", err)
	}
	rev := b.Manifest.Revision
	if rev == "" {
		rev = "bundle"
	}
	e := &Engine{modules: mods}
	c, err := e.newCompiled(ctx, pq, store, rev, mods)
	if err != nil {
		return nil, fmt.Errorf("policy: compile bundle: %w", err)
	}
	e.swap(c)
	return e, nil
}
