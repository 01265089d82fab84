package metatool

import (
	"context"

	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
)

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
func (m *Tools) Plan(ctx context.Context, ec identity.ExecContext, req PlanRequest) (*PlanResult, error) {
	if req.GoalCapabilityRef == "" {
		return nil, invalidArgument("missing required field /goalCapabilityRef")
	}
	depth, err := countArg("/maxDepth", req.MaxDepth, DefaultPlanDepth, MaxPlanDepth)
	if err != nil {
		return nil, err
	}
	snap := m.d.Catalog.Snapshot()
	authz := m.authorizer(snap, ec)
	goal, ok := snap.For(ec.Org, req.GoalCapabilityRef)
	if ok {
		ok = authz.allows(ctx, goal)
	}
	if !ok {
		return nil, gateway.UnknownCapability(req.GoalCapabilityRef)
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
