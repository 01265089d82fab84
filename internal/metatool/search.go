package metatool

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/store"
)

// SearchRequest is the flat, all-optional argument object of xema_capabilities_search.
type SearchRequest struct {
	Query        string `json:"query,omitempty"`
	Domain       string `json:"domain,omitempty"`
	ResourceType string `json:"resourceType,omitempty"`
	Mutating     *bool  `json:"mutating,omitempty"`
	Limit        int    `json:"limit,omitempty"`
	Cursor       string `json:"cursor,omitempty"`
}

// SearchHit is one capability in a search answer.
type SearchHit struct {
	Ref              string `json:"ref"`
	Biome            string `json:"biome"`
	Title            string `json:"title"`
	Summary          string `json:"summary"`
	RiskTier         string `json:"riskTier"`
	Mutating         bool   `json:"mutating"`
	RequiresApproval bool   `json:"requiresApproval"`
	Deprecated       bool   `json:"deprecated,omitempty"`
	ReplacedBy       string `json:"replacedBy,omitempty"`
}

// Anchor says how a search was scoped.
type Anchor struct {
	ResourceType *string `json:"resourceType"`
	Source       string  `json:"source"` // argument | query | none
}

// SearchResult is the answer of xema_capabilities_search.
type SearchResult struct {
	Capabilities    []SearchHit `json:"capabilities"`
	Anchor          Anchor      `json:"anchor"`
	ConsideredCount int         `json:"consideredCount"`
	NextCursor      string      `json:"nextCursor,omitempty"`
}

// Search returns only the capabilities the caller is both armed and authorized to invoke.
func (m *Tools) Search(ctx context.Context, ec identity.ExecContext, req SearchRequest) (*SearchResult, error) {
	limit, err := countArg("/limit", req.Limit, DefaultSearchLimit, MaxSearchLimit)
	if err != nil {
		return nil, err
	}
	snap := m.d.Catalog.Snapshot()
	authz := m.authorizer(snap, ec)
	authz.cut(ctx)
	graph := authz.view.graph
	anchor := Anchor{Source: "none"}
	switch {
	case req.ResourceType != "":
		rt := req.ResourceType
		anchor = Anchor{ResourceType: &rt, Source: "argument"}
	default:
		if rt, ok := graph.nounIn(req.Query); ok {
			anchor = Anchor{ResourceType: &rt, Source: "query"}
		}
	}
	// The caller is its org and subject: a cursor of acme's agent:bot does not open for
	// beta's agent:bot.
	queryKey := fmt.Sprintf("%q|%s|%s|%v|%s|%v|%d", ec.Org, ec.Subject.Ref, req.Query, anchor.ResourceType != nil && *anchor.ResourceType != "", req.Domain, req.Mutating, limit)
	if anchor.ResourceType != nil {
		queryKey += "|" + *anchor.ResourceType
	}
	offset, err := m.cursors().open(req.Cursor, queryKey)
	if err != nil {
		return nil, err
	}

	terms := strings.Fields(strings.ToLower(req.Query))
	type scored struct{ at, score int } // a position in the view, its relevance
	var hits []scored
	view := authz.view
	for _, i := range considered(view, authz, anchor) {
		e := view.entries[i]
		if !visible(e) || (req.Domain != "" && domainOf(e.Ref()) != req.Domain) ||
			(req.Mutating != nil && *req.Mutating != mutates(e)) {
			continue
		}
		score := relevance(terms, view.text[i], anchor.Source == "query")
		if len(terms) > 0 && anchor.Source != "query" && score == 0 {
			continue
		}
		if !authz.allowsAt(ctx, i) {
			continue
		}
		hits = append(hits, scored{at: i, score: score})
	}
	// Stable: equal scores keep the view's order (by ref), so pages do not overlap.
	slices.SortStableFunc(hits, func(a, b scored) int { return cmp.Compare(b.score, a.score) })
	res := &SearchResult{Capabilities: []SearchHit{}, Anchor: anchor, ConsideredCount: len(hits)}
	offset = min(offset, len(hits))
	end := min(offset+limit, len(hits))
	for _, h := range hits[offset:end] {
		e := view.entries[h.at]
		m := e.Manifest
		res.Capabilities = append(res.Capabilities, SearchHit{
			Ref: e.Ref(), Biome: e.Capability.BiomeID, Title: m.Title, Summary: m.Summary,
			RiskTier: m.RiskTier, Mutating: mutates(e), RequiresApproval: m.RequiresApproval,
			Deprecated: e.Capability.Lifecycle == store.LifecycleDeprecated, ReplacedBy: e.Capability.ReplacedBy,
		})
	}
	if end < len(hits) {
		res.NextCursor = m.cursors().seal(end, queryKey)
	}
	return res, nil
}

// considered are the view's positions a search looks at: the anchored neighbourhood
// (capabilities consuming or producing the anchor type), else the ones the caller is known
// to be admitted to once all are decided, else the whole catalogue.
func considered(v *orgView, authz authorizer, a Anchor) []int {
	if a.ResourceType != nil {
		near := v.graph.neighbourhood(*a.ResourceType)
		out := make([]int, len(near))
		for k, e := range near {
			out[k] = v.index[e.Ref()]
		}
		return out
	}
	if list := authz.admitted(); list != nil {
		return list
	}
	all := make([]int, len(v.entries))
	for i := range all {
		all[i] = i
	}
	return all
}

// searchText is what a query matches of an entry, lower-cased once per snapshot.
type searchText struct{ ref, title, summary string }

func relevance(terms []string, t searchText, anchored bool) int {
	score := 0
	if anchored {
		score = 1
	}
	for _, term := range terms {
		if strings.Contains(t.ref, term) {
			score += 3
		}
		if strings.Contains(t.title, term) {
			score += 2
		}
		if strings.Contains(t.summary, term) {
			score++
		}
	}
	return score
}
