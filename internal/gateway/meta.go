package gateway

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/store"
)

// Schema annotations authors use to place a capability in the capability graph:
// "x-xema-resourceType" on an inputSchema property means the capability consumes that
// resource type; on the outputSchema (its root or a property) it produces that type.
const ResourceTypeAnnotation = "x-xema-resourceType"

// Limits of the meta-tools.
const (
	MaxDescribeRefs    = 50
	DefaultSearchLimit = 20
	MaxSearchLimit     = 100
	DefaultPlanDepth   = 5
	MaxPlanDepth       = 10
)

// visible reports whether search may show entry at all, before asking the policy.
func visible(e *catalog.Entry) bool {
	switch e.Capability.Lifecycle {
	case store.LifecyclePublished, store.LifecycleDeprecated:
		return true
	}
	return false
}

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
func (g *Gateway) Search(ctx context.Context, ec identity.ExecContext, req SearchRequest) (*SearchResult, error) {
	limit := req.Limit
	switch {
	case limit == 0:
		limit = DefaultSearchLimit
	case limit < 0 || limit > MaxSearchLimit:
		return nil, badRequest("INVALID_ARGUMENT", fmt.Sprintf("/limit must be between 1 and %d", MaxSearchLimit))
	}
	snap := g.d.Catalog.Snapshot()
	authz := g.authorizer(snap, ec)
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
	offset, err := g.cursors().open(req.Cursor, queryKey)
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
		res.NextCursor = g.cursors().seal(end, queryKey)
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

func mutates(e *catalog.Entry) bool {
	return e.Manifest.EffectClass == "write" || e.Manifest.EffectClass == "admin"
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

func domainOf(ref string) string {
	d, _, _ := strings.Cut(ref, ":")
	return d
}

// DescribeRequest is the argument of xema_capabilities_describe.
type DescribeRequest struct {
	Refs []string `json:"refs"`
}

// Description is one described capability.
type Description struct {
	Ref              string           `json:"ref"`
	InputSchema      map[string]any   `json:"inputSchema"`
	OutputSchema     map[string]any   `json:"outputSchema"`
	Examples         []map[string]any `json:"examples"`
	SideEffects      string           `json:"sideEffects"`
	RequiresApproval bool             `json:"requiresApproval"`
	Biome            BiomeRef         `json:"biome"`
	ReplacedBy       string           `json:"replacedBy,omitempty"`
}

// BiomeRef names the biome version that provides a capability.
type BiomeRef struct {
	ID      string `json:"id"`
	Version string `json:"version"`
}

// Describe returns the full schemas of up to MaxDescribeRefs refs. A ref the caller may not
// invoke is answered exactly like an unknown one.
func (g *Gateway) Describe(ctx context.Context, ec identity.ExecContext, req DescribeRequest) ([]Description, error) {
	switch {
	case len(req.Refs) == 0:
		return nil, badRequest("INVALID_ARGUMENT", "/refs must name at least one ref")
	case len(req.Refs) > MaxDescribeRefs:
		return nil, badRequest("INVALID_ARGUMENT", fmt.Sprintf("/refs names %d refs; at most %d per call", len(req.Refs), MaxDescribeRefs))
	}
	snap := g.d.Catalog.Snapshot()
	authz := g.authorizer(snap, ec)
	authz.cut(ctx)
	out := make([]Description, 0, len(req.Refs))
	var unknown []string
	for _, ref := range req.Refs {
		e, ok := snap.For(ec.Org, ref)
		if ok {
			ok = authz.allows(ctx, e)
		}
		if !ok {
			unknown = append(unknown, ref)
			continue
		}
		m := e.Manifest
		examples := m.Examples
		if examples == nil {
			examples = []map[string]any{}
		}
		out = append(out, Description{
			Ref: ref, InputSchema: m.InputSchema, OutputSchema: m.OutputSchema, Examples: examples,
			SideEffects: m.SideEffects, RequiresApproval: m.RequiresApproval,
			Biome:      BiomeRef{ID: e.Capability.BiomeID, Version: e.Capability.BiomeVersion},
			ReplacedBy: e.Capability.ReplacedBy,
		})
	}
	if len(unknown) > 0 {
		return nil, &fault.Error{Kind: fault.NotFound, Code: CodeUnknownCapability,
			Message: fmt.Sprintf("no capability %s", strings.Join(unknown, ", "))}
	}
	return out, nil
}

func badRequest(code, msg string) *fault.Error {
	return &fault.Error{Kind: fault.Invalid, Code: code, Message: msg}
}

func (g *Gateway) cursors() cursorSealer { return cursorSealer{key: g.d.CursorKey} }

// cursorSealer makes opaque pagination cursors bound to the query that produced them.
type cursorSealer struct{ key []byte }

type cursorBody struct {
	Offset int    `json:"o"`
	Query  string `json:"q"`
	// Pos is a keyset position (SealPosition); empty in search cursors.
	Pos string `json:"p,omitempty"`
}

func (s cursorSealer) seal(offset int, queryKey string) string {
	return s.sealBody(cursorBody{Offset: offset, Query: queryHash(queryKey)})
}

func (s cursorSealer) sealBody(b cursorBody) string {
	body, _ := json.Marshal(b)
	mac := hmac.New(sha256.New, s.key)
	mac.Write(body)
	return base64.RawURLEncoding.EncodeToString(append(mac.Sum(nil), body...))
}

func (s cursorSealer) open(cursor, queryKey string) (int, error) {
	if cursor == "" {
		return 0, nil
	}
	body, err := s.openBody(cursor, queryKey)
	if err != nil {
		return 0, err
	}
	return body.Offset, nil
}

// openBody verifies cursor's MAC and that it was issued for queryKey.
func (s cursorSealer) openBody(cursor, queryKey string) (cursorBody, error) {
	invalid := badRequest("INVALID_CURSOR", "/cursor is not a cursor this query issued")
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(raw) <= sha256.Size {
		return cursorBody{}, invalid
	}
	mac := hmac.New(sha256.New, s.key)
	mac.Write(raw[sha256.Size:])
	if !hmac.Equal(mac.Sum(nil), raw[:sha256.Size]) {
		return cursorBody{}, invalid
	}
	var body cursorBody
	if json.Unmarshal(raw[sha256.Size:], &body) != nil || body.Query != queryHash(queryKey) || body.Offset < 0 {
		return cursorBody{}, invalid
	}
	return body, nil
}

// SealPosition makes an opaque cursor holding pos (a keyset position of a listing other
// than search, e.g. GET /v1/audit), signed with the deployment's cursor key and bound to
// queryKey: a cursor opens only for the query (and caller) that got it.
func (g *Gateway) SealPosition(pos, queryKey string) string {
	return g.cursors().sealBody(cursorBody{Query: queryHash("position|" + queryKey), Pos: pos})
}

// OpenPosition returns the position SealPosition sealed for queryKey, or a 400
// INVALID_CURSOR error naming the cursor parameter.
func (g *Gateway) OpenPosition(cursor, queryKey string) (string, error) {
	body, err := g.cursors().openBody(cursor, "position|"+queryKey)
	if err != nil {
		return "", err
	}
	if body.Pos == "" {
		return "", badRequest("INVALID_CURSOR", "cursor is not a cursor this query issued")
	}
	return body.Pos, nil
}

func queryHash(q string) string {
	sum := sha256.Sum256([]byte(q))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}
