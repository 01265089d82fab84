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

// searchSetsQuery is SearchableQuery with, among it, the refs the caller's call is clean for.
const searchSetsQuery = "data.xema.authz.search_sets"

// SearchSets is what search reads of the policy for one caller.
type SearchSets struct {
	// Cut holds every ref Decide may allow the caller (TestSearchableIsSound), and others.
	Cut map[string]bool
	// Clean holds only refs Decide allows the caller (TestSearchableIsSound), a subset of
	// Cut; nil when the bundle's Rego is not the embedded policy's, for which search.rego's
	// mirror of clean proves nothing.
	Clean map[string]bool
}

// searchableQuery is the search query prepared once per bundle, on the first search:
// searchSetsQuery for the embedded policy (compiled.own), else SearchableQuery.
type searchableQuery struct {
	once sync.Once
	q    rego.PreparedEvalQuery
	err  error
}

// Searchable returns the caller's search sets under the serving bundle; in's ref and
// resource are not read. An error means: no first cut, decide every ref.
func (e *Engine) Searchable(ctx context.Context, in Input) (SearchSets, error) {
	c := e.serving.Load()
	if c == nil {
		return SearchSets{}, ErrNoBundle
	}
	s := &c.searchable
	s.once.Do(func() {
		query := SearchableQuery
		if c.own {
			query = searchSetsQuery
		}
		s.q, s.err = prepare(ctx, query, c.store, c.mods)
	})
	if s.err != nil {
		return SearchSets{}, fmt.Errorf("policy: prepare the search query (revision %s): %w", c.revision, s.err)
	}
	in.Ref, in.Resource = "", ""
	opts, stop := evalOptions(ctx, inputValue(in))
	rs, err := s.q.Eval(ctx, opts...)
	stop()
	if err != nil {
		return SearchSets{}, fmt.Errorf("policy: evaluate the search query (revision %s): %w", c.revision, err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return SearchSets{}, fmt.Errorf("policy: the search query is undefined (revision %s)", c.revision)
	}
	t, ok := rs[0].Expressions[0].Value.(*ast.Term)
	if !ok {
		return SearchSets{}, fmt.Errorf("policy: the search query's result is %T, not an AST term", rs[0].Expressions[0].Value)
	}
	if !c.own {
		cut, err := refSet(SearchableQuery, t)
		return SearchSets{Cut: cut}, err
	}
	obj, ok := t.Value.(ast.Object)
	if !ok {
		return SearchSets{}, fmt.Errorf("policy: %s is %v, not an object", searchSetsQuery, ast.ValueName(t.Value))
	}
	var sets SearchSets
	if sets.Cut, err = refSet(searchSetsQuery+".cut", obj.Get(ast.StringTerm("cut"))); err != nil {
		return SearchSets{}, err
	}
	if sets.Clean, err = refSet(searchSetsQuery+".clean", obj.Get(ast.StringTerm("clean"))); err != nil {
		return SearchSets{}, err
	}
	return sets, nil
}

// refSet reads t, the value of name, as a set of refs.
func refSet(name string, t *ast.Term) (map[string]bool, error) {
	if t == nil {
		return nil, fmt.Errorf("policy: %s is undefined", name)
	}
	set, ok := t.Value.(ast.Set)
	if !ok {
		return nil, fmt.Errorf("policy: %s is %v, not a set", name, ast.ValueName(t.Value))
	}
	refs := make(map[string]bool, set.Len())
	var bad error
	set.Foreach(func(x *ast.Term) {
		if s, ok := x.Value.(ast.String); ok {
			refs[string(s)] = true
		} else if bad == nil {
			bad = fmt.Errorf("policy: %s holds %v, not a ref", name, x)
		}
	})
	if bad != nil {
		return nil, bad
	}
	return refs, nil
}
