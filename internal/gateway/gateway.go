// Package gateway is the funnel every capability call goes through, in this order:
// authenticate (done by the transport, which hands in the verified ExecContext) → route →
// validate → authorize → obligations → resolve → run → audit. Invoke (funnel.go) reads as that
// sequence. Beside it, and not in it: the other meta-tools (package metatool), idempotency keys
// (package idempotency), outbound capacity (package capacity), the aggregate audit of
// unauthenticated attempts (package unauth) and the outage log (package outage).
package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/xemahq/xema/internal/capacity"
	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/outage"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/ratelimit"
	"github.com/xemahq/xema/internal/runner"
	"github.com/xemahq/xema/internal/spool"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/txntoken"
	"github.com/xemahq/xema/internal/unauth"
)

// Connections finds, for a capability served through a connection, whose connection a call
// of ec needs and its status; nil for every other capability (federation.Federation). read is
// what the status was read from, opaque to the gateway: it carries it to the run of the same
// call (runner.WithDecided), whose runner then need not read the connection again.
type Connections interface {
	Connection(ctx context.Context, ec identity.ExecContext, entry *catalog.Entry) (conn *policy.Connection, read any, err error)
}

// ConnectionSources asks each source in turn: the first that names a connection, or read
// something for the call's run, answers.
type ConnectionSources []Connections

// Connection implements Connections.
func (cs ConnectionSources) Connection(ctx context.Context, ec identity.ExecContext, entry *catalog.Entry) (*policy.Connection, any, error) {
	for _, c := range cs {
		if conn, read, err := c.Connection(ctx, ec, entry); err != nil || conn != nil || read != nil {
			return conn, read, err
		}
	}
	return nil, nil, nil
}

// Gateway is the funnel over its Deps, built once by New.
type Gateway struct {
	d        Deps
	inflight runs
}

// Deps are the funnel's parts, each behind the small interface the funnel uses of it.
// Catalog, Policy, Audit, Kernel and HTTP are required; the others are optional, each nil
// meaning what its comment says.
type Deps struct {
	Catalog Snapshots
	Policy  Decider
	Audit   Appender
	Kernel  Handlers
	Tokens  runner.TokenSource
	HTTP    *http.Client
	// InputHashKey keys the audit records' input hashes (audit.InputHash); a per-deployment
	// secret from the store, shared by replicas.
	InputHashKey []byte
	// TxnTokens signs the Txn-Token a capability declaring trustedContextProjection
	// (critical-operation-v1, server-envelope) sends its provider; nil sends none, and such
	// a capability's calls are refused before they run.
	TxnTokens *txntoken.Signer
	// Connections says whose connection a capability served through one (an OAuth-protected
	// MCP server) needs, and its status, for the policy (input.connection); nil: none is.
	Connections Connections
	// Resolvers serve refs that neither a declared invocation nor a kernel handler serves
	// (org-level provider bindings, federated MCP servers). The first that claims a ref wins.
	Resolvers []Resolver
	// Limiter counts the decision's rate-limit and quota obligations before a call runs;
	// nil counts nothing.
	Limiter Limiter
	// Approvals holds the calls whose decision carries the approval obligation; nil
	// refuses them (fail closed).
	Approvals ApprovalQueue
	// Outbound bounds the calls running at once on a runner that leaves the process (http,
	// connector, mcp-external); beyond it a call is refused with a typed 503. nil bounds
	// nothing. Kernel handlers are not counted: a flood of slow providers must not lock an
	// admin out of the gateway's own operations.
	Outbound *capacity.Slots
	// PerProvider bounds the outbound calls in flight per provider (biome or MCP server); nil
	// is no bound beyond Outbound.
	PerProvider *capacity.ProviderSlots
	// Unauth audits unauthenticated attempts in aggregate; nil writes one record each.
	Unauth *unauth.Aggregator
	// Outages logs the outages of the dependencies a call needs (policy, audit log, rate
	// limiter, approval store), which readiness reads; nil logs none.
	Outages *outage.Tracker
	// Spool keeps the outcome records the audit log could not take, and writes them once
	// the store is back; nil keeps none (the answer still says the call ran).
	Spool *spool.Spool
}

// Snapshots hands out the catalog serving now (catalog.Catalog).
type Snapshots interface {
	Snapshot() *catalog.Snapshot
}

// Decider is the policy engine as the funnel asks it (policy.Engine).
type Decider interface {
	Decide(ctx context.Context, in policy.Input) (policy.Decision, error)
	Revision() string
}

// Appender commits audit records (audit.Log).
type Appender interface {
	Append(ctx context.Context, rec store.AuditRecord) error
}

// Handlers finds the gateway's own capability handlers (kernel.Registry).
type Handlers interface {
	Handler(ref string) (kernel.Handler, bool)
}

// Limiter counts a call against its decision's limits (ratelimit.Limiter).
type Limiter interface {
	Take(ctx context.Context, k ratelimit.Key, obs []policy.Obligation) (*policy.Usage, error)
}

// New builds the funnel over d; a required part missing is an error, never a nil deref on
// the first call.
func New(d Deps) (*Gateway, error) {
	var missing []string
	for name, set := range map[string]bool{"Catalog": d.Catalog != nil, "Policy": d.Policy != nil, "Audit": d.Audit != nil,
		"Kernel": d.Kernel != nil, "HTTP": d.HTTP != nil} {
		if !set {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("gateway: missing %s", strings.Join(missing, ", "))
	}
	return &Gateway{d: d}, nil
}

// Deps are the parts g was built over (a copy: change it and call New for another funnel).
func (g *Gateway) Deps() Deps { return g.d }

// ApprovalQueue keeps a call until a person approves it. A call identical to one its
// requester has pending (same context, ref, biome version and input) joins that one instead
// of being held again: one decision, one run.
type ApprovalQueue interface {
	// Admit is asked before anything of p is stored: joined names the identical call pending
	// already (p is not to be held); a *fault.Error refuses p (e.g. its requester has too many
	// calls pending), another error is the queue's outage. release is called once the call is
	// held, joined, or not.
	Admit(ctx context.Context, p Pending) (joined *Joined, release func(), err error)
	// Hold stores p; when an identical call was held meanwhile, it stores nothing and joined
	// names that call.
	Hold(ctx context.Context, p Pending) (joined *Joined, err error)
}

// Joined is the pending call an identical one joined: its approval and its audit record.
type Joined struct{ ApprovalID, AuditID string }

// Pending is a call held for approval: who asked, what, with the validated input, and what
// the approver needs to judge it (the pinned biome version, the capability's risk tier, the
// policy revision that held it).
type Pending struct {
	ID             string // the approval id the caller is answered
	AuditID        string // the audit record of the call
	Ref            string
	Biome          string
	BiomeVersion   string
	RiskTier       string
	PolicyRevision string
	Exec           identity.ExecContext
	Input          json.RawMessage
}

// Resolver finds the runner for an entry in the caller's context. ok is false when the
// resolver does not serve the entry; an error is a typed *fault.Error (e.g. a missing binding).
type Resolver interface {
	Resolve(ctx context.Context, ec identity.ExecContext, entry *catalog.Entry) (r runner.Runner, ok bool, err error)
}

// Request is one invocation: `{ref, input}` of the spec.
type Request struct {
	Ref   string          `json:"ref"`
	Input json.RawMessage `json:"input"`
	// Approval is the approval that released a held call (RunApproved); nil otherwise.
	Approval *txntoken.Approval `json:"-"`
}

// Result is how the funnel decided a call: it ran (Output, answered `{output, auditId,
// obligations}`), the policy or a limit refused it (Denial), or it waits for a person's
// approval (Held). A refusal or a hold is the funnel working, so it is a result; an error
// is a call the funnel could not decide or run.
type Result struct {
	Output      json.RawMessage     `json:"output"`
	AuditID     string              `json:"auditId"`
	Obligations []policy.Obligation `json:"obligations"`
	Denial      *Denial             `json:"-"`
	Held        *Held               `json:"-"`
}

// code is the result's answer code: "" for a call that ran.
func (r *Result) code() string {
	switch {
	case r == nil:
		return ""
	case r.Denial != nil:
		return r.Denial.Code
	case r.Held != nil:
		return r.Held.Code
	}
	return ""
}
