package policy

import (
	"context"
	"fmt"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// SearchableQuery is the superset of the refs a caller may be admitted to (policies/search.rego),
// undefined when the data lacks the index it reads.
const SearchableQuery = "data.xema.authz.search_cut"

// searchableQuery is SearchableQuery prepared once per bundle, on the first search.
type searchableQuery struct {
	once sync.Once
	q    rego.PreparedEvalQuery
	err  error
}

// Searchable returns the refs the caller of in (its ref and resource are not read) could
// be admitted to under the serving bundle: every ref Decide allows for this caller is in it
// (TestSearchableIsSound), so search decides only these. An error means: no first cut, decide
// every ref.
func (e *Engine) Searchable(ctx context.Context, in Input) (map[string]bool, error) {
	c := e.serving.Load()
	if c == nil {
		return nil, ErrNoBundle
	}
	c.searchable.once.Do(func() { c.searchable.q, c.searchable.err = prepare(ctx, SearchableQuery, c.store, c.mods) })
	if c.searchable.err != nil {
		return nil, fmt.Errorf("policy: prepare %s (revision %s): %w", SearchableQuery, c.revision, c.searchable.err)
	}
	in.Ref, in.Resource = "", ""
	opts, stop := evalOptions(ctx, inputValue(in))
	evalMu.RLock() // until the result, which holds shared terms, is read (fast.go)
	defer evalMu.RUnlock()
	rs, err := c.searchable.q.Eval(ctx, opts...)
	stop()
	if err != nil {
		return nil, fmt.Errorf("policy: evaluate %s (revision %s): %w", SearchableQuery, c.revision, err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return nil, fmt.Errorf("policy: %s is undefined (revision %s)", SearchableQuery, c.revision)
	}
	t, ok := rs[0].Expressions[0].Value.(*ast.Term)
	if !ok {
		return nil, fmt.Errorf("policy: %s is %T, not an AST term", SearchableQuery, rs[0].Expressions[0].Value)
	}
	set, ok := t.Value.(ast.Set)
	if !ok {
		return nil, fmt.Errorf("policy: %s is %v, not a set", SearchableQuery, ast.ValueName(t.Value))
	}
	refs := make(map[string]bool, set.Len())
	var bad error
	set.Foreach(func(x *ast.Term) {
		if s, ok := x.Value.(ast.String); ok {
			refs[string(s)] = true
		} else if bad == nil {
			bad = fmt.Errorf("policy: %s holds %v, not a ref", SearchableQuery, x)
		}
	})
	return refs, bad
}
