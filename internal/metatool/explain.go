package metatool

import (
	"context"
	"strings"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/explain"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/policy"
)

// ExplainRequest is `{capabilityRef, denialCode}`.
type ExplainRequest struct {
	CapabilityRef string `json:"capabilityRef"`
	DenialCode    string `json:"denialCode"`
}

// ExplainResult is `{permissions, domain, biome, suggestions, next}`: the explanation of
// package explain (the one a denial and why-denied give), for the caller's current decision.
type ExplainResult struct {
	Permissions []explain.Permission `json:"permissions"`
	Domain      string               `json:"domain"`
	Biome       BiomeRef             `json:"biome"`
	DenialCode  string               `json:"denialCode"`
	Reasons     []policy.Reason      `json:"reasons"`
	Suggestions []policy.Suggestion  `json:"suggestions"`
	// Next are the steps in words, as why-denied prints them.
	Next []string `json:"next"`
}

// Explain turns a denial code into what would unlock the capability for this caller in its
// current environment (package explain): the exact grant when a grant is what is missing,
// the org role when the capability is held by role (humanBaseline), when to retry a limited
// call, never what the caller already holds.
func (m *Tools) Explain(ctx context.Context, ec identity.ExecContext, req ExplainRequest) (*ExplainResult, error) {
	if req.DenialCode == "" {
		return nil, invalidArgument("missing required field /denialCode")
	}
	if !m.d.Policy.KnownReasonCode(req.DenialCode) {
		return nil, invalidArgument("/denialCode: %q is not a reason code a denial can carry; known: %s",
			req.DenialCode, strings.Join(m.d.Policy.ReasonCodes(), ", "))
	}
	e, d, err := m.decide(ctx, ec, req.CapabilityRef)
	if err != nil {
		return nil, err
	}
	c := explain.For(e, policy.Subject{Kind: ec.Subject.Kind, Ref: ec.Subject.Ref}, ec.Environment, d)
	c.Asked = req.DenialCode
	x := explain.Of(c)
	res := &ExplainResult{
		Domain: domainOf(e.Ref()), DenialCode: req.DenialCode,
		Biome:       BiomeRef{ID: e.Capability.BiomeID, Version: e.Capability.BiomeVersion},
		Reasons:     []policy.Reason{},
		Suggestions: x.Suggestions, Permissions: x.Permissions, Next: x.Next,
	}
	for _, r := range d.Reasons {
		if r.Code == req.DenialCode {
			res.Reasons = append(res.Reasons, r)
		}
	}
	return res, nil
}

// WhyDenied explains the recorded denial den of org as the call's answer did (package
// explain), with the catalog as it is now: the grant it names is one that can be made today.
func (m *Tools) WhyDenied(org string, den audit.Denial) (explain.Denial, error) {
	e, _ := m.d.Catalog.Snapshot().For(org, den.Capability) // nil: the ref is gone, no grant to name
	c, err := explain.Recorded(e, den)
	if err != nil {
		return explain.Denial{}, err
	}
	return explain.Deny(den, explain.Of(c)), nil
}
