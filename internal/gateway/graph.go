package gateway

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/identity"
)

// graph is the capability graph: resource types are nodes, a capability consumes the types
// its input names and produces the types its output names.
type graph struct {
	consumes  map[string][]string // ref → resource types
	produces  map[string][]string
	producers map[string][]*catalog.Entry // resource type → capabilities producing it
	touching  map[string][]*catalog.Entry // resource type → capabilities consuming or producing it
}

func buildGraph(entries []*catalog.Entry) *graph {
	g := &graph{consumes: map[string][]string{}, produces: map[string][]string{},
		producers: map[string][]*catalog.Entry{}, touching: map[string][]*catalog.Entry{}}
	for _, e := range entries {
		in := annotatedTypes(e.Manifest.InputSchema, false)
		out := annotatedTypes(e.Manifest.OutputSchema, true)
		g.consumes[e.Ref()], g.produces[e.Ref()] = in, out
		for _, t := range out {
			g.producers[t] = append(g.producers[t], e)
		}
		for _, t := range union(in, out) {
			g.touching[t] = append(g.touching[t], e)
		}
	}
	return g
}

// annotatedTypes reads ResourceTypeAnnotation from a schema's properties (and, for outputs,
// its root), sorted and unique.
func annotatedTypes(schema map[string]any, root bool) []string {
	set := map[string]bool{}
	if t, ok := schema[ResourceTypeAnnotation].(string); ok && root {
		set[t] = true
	}
	props, _ := schema["properties"].(map[string]any)
	for _, p := range props {
		if ps, ok := p.(map[string]any); ok {
			if t, ok := ps[ResourceTypeAnnotation].(string); ok {
				set[t] = true
			}
		}
	}
	return keys(set)
}

func union(a, b []string) []string {
	set := map[string]bool{}
	for _, s := range append(append([]string{}, a...), b...) {
		set[s] = true
	}
	return keys(set)
}

func keys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (g *graph) neighbourhood(resourceType string) []*catalog.Entry {
	return g.touching[resourceType]
}

// nounIn finds a known resource type named in a free-text query ("pull request" matches
// change_request only if spelled as the type; underscores and hyphens match spaces).
func (g *graph) nounIn(query string) (string, bool) {
	q := " " + strings.ToLower(query) + " "
	var found []string
	for t := range g.touching {
		for _, form := range []string{t, strings.ReplaceAll(t, "_", " "), strings.ReplaceAll(t, "_", "-")} {
			if strings.Contains(q, " "+form+" ") {
				found = append(found, t)
				break
			}
		}
	}
	if len(found) == 0 {
		return "", false
	}
	sort.Slice(found, func(i, j int) bool {
		return len(found[i]) > len(found[j]) || (len(found[i]) == len(found[j]) && found[i] < found[j])
	})
	return found[0], true
}

// PlanRequest is the argument of xema_capabilities_plan.
type PlanRequest struct {
	GoalCapabilityRef string   `json:"goalCapabilityRef"`
	FromResourceTypes []string `json:"fromResourceTypes"`
	MaxDepth          int      `json:"maxDepth,omitempty"`
}

// PlanStep is one capability to call, in order.
type PlanStep struct {
	Ref      string   `json:"ref"`
	Consumes []string `json:"consumes"`
	Produces []string `json:"produces"`
}

// PlanResult is `{goal, found, steps, missingResourceTypes}`.
type PlanResult struct {
	Goal                 string     `json:"goal"`
	Found                bool       `json:"found"`
	Steps                []PlanStep `json:"steps"`
	MissingResourceTypes []string   `json:"missingResourceTypes"`
}

// Plan derives the shortest runnable sequence ending in the goal capability, using only
// capabilities the caller may invoke. Each resource type is reached by the cheapest
// producer (fewest steps), found by relaxing until nothing improves or maxDepth is hit.
func (g *Gateway) Plan(ctx context.Context, ec identity.ExecContext, req PlanRequest) (*PlanResult, error) {
	depth := req.MaxDepth
	switch {
	case req.GoalCapabilityRef == "":
		return nil, badRequest("INVALID_ARGUMENT", "missing required field /goalCapabilityRef")
	case depth == 0:
		depth = DefaultPlanDepth
	case depth < 1 || depth > MaxPlanDepth:
		return nil, badRequest("INVALID_ARGUMENT", fmt.Sprintf("/maxDepth must be between 1 and %d", MaxPlanDepth))
	}
	snap := g.d.Catalog.Snapshot()
	authz := g.authorizer(snap, ec)
	goal, ok := snap.For(ec.Org, req.GoalCapabilityRef)
	if ok {
		ok = authz.allows(ctx, goal)
	}
	if !ok {
		return nil, unknownCapability(req.GoalCapabilityRef)
	}
	gr := authz.view.graph

	// cost[t] = steps needed to hold t; via[t] = the capability producing it.
	cost := map[string]int{}
	via := map[string]*catalog.Entry{}
	for _, t := range req.FromResourceTypes {
		cost[t] = 0
	}
	allowed := map[string]bool{}
	for round := 0; round < depth; round++ {
		changed := false
		for t, producers := range gr.producers {
			for _, p := range producers {
				if p.Ref() == goal.Ref() || !visible(p) {
					continue
				}
				if _, seen := allowed[p.Ref()]; !seen {
					allowed[p.Ref()] = authz.allows(ctx, p)
				}
				c, ok := costOf(gr.consumes[p.Ref()], cost)
				if !allowed[p.Ref()] || !ok {
					continue
				}
				if old, have := cost[t]; !have || c+1 < old {
					cost[t], via[t] = c+1, p
					changed = true
				}
			}
		}
		if !changed {
			break
		}
	}

	res := &PlanResult{Goal: goal.Ref(), Steps: []PlanStep{}, MissingResourceTypes: []string{}}
	added := map[string]bool{}
	var visit func(t string)
	visit = func(t string) {
		p := via[t]
		if p == nil || added[p.Ref()] {
			return
		}
		for _, in := range gr.consumes[p.Ref()] {
			visit(in)
		}
		added[p.Ref()] = true
		res.Steps = append(res.Steps, PlanStep{Ref: p.Ref(), Consumes: gr.consumes[p.Ref()], Produces: gr.produces[p.Ref()]})
	}
	for _, t := range gr.consumes[goal.Ref()] {
		if _, ok := cost[t]; !ok {
			res.MissingResourceTypes = append(res.MissingResourceTypes, t)
			continue
		}
		visit(t)
	}
	res.Found = len(res.MissingResourceTypes) == 0
	if res.Found {
		res.Steps = append(res.Steps, PlanStep{Ref: goal.Ref(), Consumes: gr.consumes[goal.Ref()], Produces: gr.produces[goal.Ref()]})
	}
	return res, nil
}

// costOf is the steps needed to hold every type in need (the producers' chains summed as an
// upper bound; shared prefixes are counted once when the plan is read back).
func costOf(need []string, cost map[string]int) (int, bool) {
	total := 0
	for _, t := range need {
		c, ok := cost[t]
		if !ok {
			return 0, false
		}
		total += c
	}
	return total, true
}
