package metatool

import (
	"context"

	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/identity"
)

// Caller is the answer of GET /v1/me: the caller as the gateway verified the token, and the
// gateway's own operations (kernel capabilities) the policy lets it invoke.
type Caller struct {
	Subject     identity.Subject `json:"subject"`
	Org         string           `json:"org"`
	OrgRole     string           `json:"orgRole,omitempty"`
	Environment string           `json:"environment"`
	Project     string           `json:"project,omitempty"`
	// Delegation is set when the caller acts for a person: who, and the actor chain.
	Delegation *identity.Delegation `json:"delegation,omitempty"`
	Operations []string             `json:"operations"`
}

// Whoami describes the caller.
func (m *Tools) Whoami(ctx context.Context, ec identity.ExecContext) Caller {
	return Caller{Subject: ec.Subject, Org: ec.Org, OrgRole: ec.OrgRole, Environment: ec.Environment, Project: ec.Project,
		Delegation: ec.Delegation, Operations: m.operations(ctx, ec)}
}

// operations returns the refs of the gateway's own capabilities (kernel runners) the caller
// may invoke, as search decides them, sorted: what a console may offer this caller.
func (m *Tools) operations(ctx context.Context, ec identity.ExecContext) []string {
	snap := m.d.Catalog.Snapshot()
	authz := m.authorizer(snap, ec)
	authz.cut(ctx)
	out := []string{}
	for _, e := range snap.AllFor(ec.Org) {
		if builtIn(e) && authz.allows(ctx, e) {
			out = append(out, e.Ref())
		}
	}
	return out
}

// OperationReads returns the refs of the gateway's own capabilities that only read (effect
// class read): a person's page loads through the console are calls of these.
func (m *Tools) OperationReads(org string) []string {
	out := []string{}
	for _, e := range m.d.Catalog.Snapshot().AllFor(org) {
		if builtIn(e) && e.Manifest.EffectClass == "read" {
			out = append(out, e.Ref())
		}
	}
	return out
}

// builtIn: e is one of the gateway's own operations (the built-in biome's, served in process).
func builtIn(e *catalog.Entry) bool {
	return e.Capability.BiomeID == catalog.BuiltinBiome && e.Capability.RunnerKind == "kernel"
}
