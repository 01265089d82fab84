package metatool

import (
	"context"
	"strings"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
)

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
func (m *Tools) Describe(ctx context.Context, ec identity.ExecContext, req DescribeRequest) ([]Description, error) {
	switch {
	case len(req.Refs) == 0:
		return nil, invalidArgument("/refs must name at least one ref")
	case len(req.Refs) > MaxDescribeRefs:
		return nil, invalidArgument("/refs names %d refs; at most %d per call", len(req.Refs), MaxDescribeRefs)
	}
	snap := m.d.Catalog.Snapshot()
	authz := m.authorizer(snap, ec)
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
		return nil, fault.New(fault.NotFound, gateway.CodeUnknownCapability, "no capability %s", strings.Join(unknown, ", "))
	}
	return out, nil
}
