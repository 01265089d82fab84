// Package metatool holds the meta-tools beside the funnel: search, describe, plan, preflight,
// explain and whoami. They read the catalog and ask the policy what the caller may invoke,
// and run nothing: a call is the funnel's (package gateway).
package metatool

import (
	"context"
	"errors"
	"strings"

	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/outage"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/runner"
	"github.com/xemahq/xema/internal/store"
)

// Tools answers the meta-tools over its Deps, built once by New.
type Tools struct{ d Deps }

// Deps are the parts the meta-tools read, each behind the small interface they use of it;
// Catalog, Policy and Runners are required.
type Deps struct {
	Catalog gateway.Snapshots
	Policy  Decider
	// Runners is the funnel's resolve step: preflight asks it whether a runner serves a ref.
	Runners Runners
	// CursorKey signs search and listing cursors; replicas sharing it accept each other's.
	CursorKey []byte
	// Outages logs the policy's outages; nil logs none.
	Outages *outage.Tracker
}

// Decider is the policy engine as the meta-tools ask it (policy.Engine).
type Decider interface {
	Decide(ctx context.Context, in policy.Input) (policy.Decision, error)
	Revision() string
	KnownReasonCode(code string) bool
	ReasonCodes() []string
	// CacheStats says whether decisions may be remembered (Enabled: the policy is
	// deterministic and caching is on).
	CacheStats() policy.CacheStats
	// Searchable is a superset of the refs a caller may be admitted to (search decides only
	// those) and, among it, refs the caller may invoke (search shows them undecided).
	Searchable(ctx context.Context, in policy.Input) (policy.SearchSets, error)
}

// Runners finds the runner serving an entry for a caller (gateway.Gateway).
type Runners interface {
	Resolve(ctx context.Context, ec identity.ExecContext, entry *catalog.Entry) (runner.Runner, error)
	// Connection is input.connection of a call to entry (gateway.Gateway.Connection).
	Connection(ctx context.Context, ec identity.ExecContext, entry *catalog.Entry) (*policy.Connection, error)
}

// New builds the meta-tools over d; a part missing is an error, never a nil deref on the
// first call.
func New(d Deps) (*Tools, error) {
	if d.Catalog == nil || d.Policy == nil || d.Runners == nil {
		return nil, errors.New("metatool: Catalog, Policy and Runners are required")
	}
	return &Tools{d: d}, nil
}

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

// countArg is an optional count argument: 0 means def, otherwise it must lie in [1, max].
func countArg(field string, v, def, max int) (int, error) {
	switch {
	case v == 0:
		return def, nil
	case v < 1 || v > max:
		return 0, invalidArgument("%s must be between 1 and %d", field, max)
	}
	return v, nil
}

// visible reports whether search may show entry at all, before asking the policy.
func visible(e *catalog.Entry) bool {
	switch e.Capability.Lifecycle {
	case store.LifecyclePublished, store.LifecycleDeprecated:
		return true
	}
	return false
}

func mutates(e *catalog.Entry) bool {
	return e.Manifest.EffectClass == "write" || e.Manifest.EffectClass == "admin"
}

func domainOf(ref string) string {
	d, _, _ := strings.Cut(ref, ":")
	return d
}

// Answer codes of the meta-tools' arguments (400).
const (
	CodeInvalidArgument = fault.CodeInvalidArgument
	CodeInvalidCursor   = "INVALID_CURSOR"
)

func invalidArgument(format string, args ...any) *fault.Error {
	return fault.New(fault.Invalid, CodeInvalidArgument, format, args...)
}

// decide is the caller's decision on ref, without a resource (preflight, explain): an unknown
// ref is UNKNOWN_CAPABILITY, no decision POLICY_UNAVAILABLE.
func (m *Tools) decide(ctx context.Context, ec identity.ExecContext, ref string) (*catalog.Entry, policy.Decision, error) {
	e, ok := m.d.Catalog.Snapshot().For(ec.Org, ref)
	if !ok {
		return nil, policy.Decision{}, gateway.UnknownCapability(ref)
	}
	in := gateway.PolicyInput(ec, e.Ref(), "")
	conn, err := m.d.Runners.Connection(ctx, ec, e)
	if err != nil {
		return nil, policy.Decision{}, err
	}
	in.Connection = conn
	d, err := m.d.Policy.Decide(ctx, in)
	if err != nil {
		return nil, policy.Decision{}, m.policyUnavailable(err)
	}
	return e, d, nil
}

// policyUnavailable answers a meta-tool the policy could not decide (fail closed).
func (m *Tools) policyUnavailable(err error) *fault.Error {
	m.d.Outages.Failed(outage.Policy, err)
	return gateway.Unavailable(gateway.CodePolicyUnavailable, outage.Policy)
}
