// Package gateway is the funnel every capability call goes through, in this order:
// authenticate (done by the transport, which hands in the verified ExecContext) → route →
// validate → authorize → obligations → resolve → run → audit. Invoke reads as that sequence.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/inputschema"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/runner"
	"github.com/xemahq/xema/internal/store"
)

// Gateway wires the funnel's parts.
type Gateway struct {
	Catalog *catalog.Catalog
	Policy  *policy.Engine
	Audit   *audit.Log
	Kernel  *kernel.Registry
	Tokens  runner.TokenSource
	HTTP    *http.Client
	// CursorKey signs search cursors; replicas sharing it accept each other's cursors.
	CursorKey []byte
	// Resolvers serve refs that neither a declared invocation nor a kernel handler serves
	// (org-level provider bindings, federated MCP servers). The first that claims a ref wins.
	Resolvers []Resolver
}

// Resolver finds the runner for an entry in the caller's context. ok is false when the
// resolver does not serve the entry; an error is a typed *Error (e.g. a missing binding).
type Resolver interface {
	Resolve(ctx context.Context, ec identity.ExecContext, entry *catalog.Entry) (r runner.Runner, ok bool, err error)
}

// Request is one invocation: `{ref, input}` of the spec.
type Request struct {
	Ref   string          `json:"ref"`
	Input json.RawMessage `json:"input"`
}

// Result is the answer of an allowed call: `{output, auditId, obligations}`.
type Result struct {
	Output      json.RawMessage     `json:"output"`
	AuditID     string              `json:"auditId"`
	Obligations []policy.Obligation `json:"obligations"`
}

// call carries one invocation through the funnel and becomes its audit record.
type call struct {
	exec  identity.ExecContext
	req   Request
	start time.Time
	rec   store.AuditRecord
}

// Invoke runs req for the caller ec through the whole funnel. Every outcome, allowed or not,
// is audited before Invoke returns; an error is always a *Error.
func (g *Gateway) Invoke(ctx context.Context, ec identity.ExecContext, req Request) (*Result, error) {
	c := g.begin(ec, req)

	entry, err := g.route(c)
	if err != nil {
		return nil, g.fail(ctx, c, audit.DecisionNotFound, err)
	}
	violations := g.validate(entry, req.Input)
	decision, err := g.authorize(ctx, c, entry)
	if err != nil {
		return nil, g.fail(ctx, c, audit.DecisionError, err)
	}
	if !decision.Allow {
		return nil, g.fail(ctx, c, audit.DecisionDenied, g.denial(c, decision))
	}
	if len(violations) > 0 {
		return nil, g.fail(ctx, c, audit.DecisionInvalid, invalidInput(violations))
	}
	if err := g.obligations(decision); err != nil {
		return nil, g.fail(ctx, c, audit.DecisionPendingApproval, err)
	}
	run, err := g.resolve(ctx, c.exec, entry)
	if err != nil {
		return nil, g.fail(ctx, c, audit.DecisionError, err)
	}
	if err := g.record(ctx, c, audit.DecisionAllowed, "dispatched"); err != nil {
		return nil, err
	}
	out, err := g.run(ctx, c, run)
	if err != nil {
		return nil, err
	}
	return &Result{Output: out, AuditID: c.rec.ID, Obligations: decision.Obligations}, nil
}

func (g *Gateway) begin(ec identity.ExecContext, req Request) *call {
	return &call{exec: ec, req: req, start: time.Now(), rec: store.AuditRecord{
		ID: audit.NewID("inv_"), Ref: req.Ref,
		SubjectKind: ec.Subject.Kind, SubjectRef: ec.Subject.Ref, Environment: ec.Environment,
		InputHash: audit.InputHash(req.Input), BundleRevision: g.Policy.Revision(),
		Detail: mustJSON(ec),
	}}
}

// route finds the catalog entry; an unknown ref is a 404.
func (g *Gateway) route(c *call) (*catalog.Entry, error) {
	entry, ok := g.Catalog.Snapshot().Get(c.req.Ref)
	if !ok {
		return nil, unknownCapability(c.req.Ref)
	}
	return entry, nil
}

// validate checks the input strictly. Violations are only reported after the policy has
// admitted the caller, so a denied caller learns nothing of the schema.
func (g *Gateway) validate(entry *catalog.Entry, input json.RawMessage) []inputschema.Violation {
	return entry.Input.Validate(input)
}

// authorize asks the embedded OPA for the decision. No decision means deny (fail closed).
func (g *Gateway) authorize(ctx context.Context, c *call, entry *catalog.Entry) (policy.Decision, error) {
	d, err := g.Policy.Decide(ctx, policyInput(c.exec, entry.Ref(), entry.Resource(c.req.Input)))
	if err != nil {
		return policy.Decision{}, unavailable(CodePolicyUnavailable, "policy", err)
	}
	c.rec.Reasons = reasonsJSON(d.Reasons)
	c.rec.Suggestions = reasonsJSON(d.Suggestions)
	c.rec.Obligations = reasonsJSON(d.Obligations)
	return d, nil
}

func (g *Gateway) denial(c *call, d policy.Decision) *Error {
	c.rec.ID = audit.NewID("deny_")
	rec := c.rec
	rec.Decision = audit.DecisionDenied
	den, _ := audit.WhyDenied(rec)
	return &Error{Status: http.StatusForbidden, Code: CodeDenied, AuditID: rec.ID,
		Message: fmt.Sprintf("%s denied: %s", c.req.Ref, summary(d.Reasons)), Denial: &den}
}

// obligations enforces what an allowing decision demands before the call may run.
func (g *Gateway) obligations(d policy.Decision) error {
	for _, o := range d.Obligations {
		if o.Kind == obligationApproval {
			return &Error{Status: http.StatusAccepted, Code: "PENDING_APPROVAL",
				Message: "this call requires a human approval before it runs"}
		}
	}
	return nil
}

// resolve picks the runner serving the entry: a declared invocation, a live kernel handler,
// or a resolver (bindings, federated servers). Publishing guaranteed exactly one way; none
// at call time is a typed error, never a fallback.
func (g *Gateway) resolve(ctx context.Context, ec identity.ExecContext, entry *catalog.Entry) (runner.Runner, error) {
	if inv := entry.Invocation; inv != nil && inv.Kind == "http" {
		return runner.HTTP{Client: g.HTTP, URL: inv.URL, Timeout: time.Duration(inv.TimeoutMs) * time.Millisecond, Tokens: g.Tokens}, nil
	}
	if h, ok := g.Kernel.Handler(entry.Ref()); ok {
		return runner.Kernel{Handler: h}, nil
	}
	for _, r := range g.Resolvers {
		run, ok, err := r.Resolve(ctx, ec, entry)
		if err != nil {
			return nil, err
		}
		if ok {
			return run, nil
		}
	}
	return nil, &Error{Status: http.StatusBadGateway, Code: CodeNoRunner,
		Message: fmt.Sprintf("%s has no runner in this environment", entry.Ref())}
}

// run executes the call and appends its outcome, linked to the decision record.
func (g *Gateway) run(ctx context.Context, c *call, r runner.Runner) (json.RawMessage, error) {
	c.rec.Runner = r.Kind()
	out, runErr := r.Run(ctx, kernel.Call{Ref: c.req.Ref, Input: c.req.Input, Exec: c.exec, AuditID: c.rec.ID})
	outcome := c.rec
	outcome.ParentID, outcome.ID = c.rec.ID, audit.OutcomeID(c.rec.ID)
	outcome.Outcome = "ok"
	var answer error
	if runErr != nil {
		answer = providerError(runErr)
		outcome.Outcome = answer.(*Error).Code
	}
	outcome.LatencyMicros = time.Since(c.start).Microseconds()
	outcome.Time = time.Now()
	if err := g.Audit.Append(ctx, outcome); err != nil {
		return nil, unavailable(CodeAuditUnavailable, "audit log", err)
	}
	if answer != nil {
		answer.(*Error).AuditID = c.rec.ID
		return nil, answer
	}
	return out, nil
}

func providerError(err error) *Error {
	var re *runner.Error
	if !errors.As(err, &re) {
		re = &runner.Error{Code: runner.CodeHandlerFailed, Message: "the runner failed"}
	}
	status := http.StatusBadGateway
	switch {
	case re.Status != 0:
		status = re.Status
	case re.Code == runner.CodeNoToken:
		status = http.StatusServiceUnavailable
	}
	return &Error{Status: status, Code: re.Code, Message: re.Message, ProviderStatus: re.ProviderStatus, Violations: re.Violations}
}

// fail audits a call that ends before running and returns the answer for the caller.
func (g *Gateway) fail(ctx context.Context, c *call, decision string, err error) error {
	var ge *Error
	if !errors.As(err, &ge) {
		ge = &Error{Status: http.StatusInternalServerError, Code: "INTERNAL", Message: "internal error"}
	}
	if ge.AuditID == "" {
		ge.AuditID = c.rec.ID
	}
	c.rec.ID = ge.AuditID
	if rerr := g.record(ctx, c, decision, ge.Code); rerr != nil {
		return rerr
	}
	return ge
}

// record appends the decision record; if the audit log cannot take it, the call is refused.
func (g *Gateway) record(ctx context.Context, c *call, decision, outcome string) error {
	c.rec.Decision, c.rec.Outcome = decision, outcome
	c.rec.Time = time.Now()
	c.rec.LatencyMicros = time.Since(c.start).Microseconds()
	if err := g.Audit.Append(ctx, c.rec); err != nil {
		return unavailable(CodeAuditUnavailable, "audit log", err)
	}
	return nil
}

// RecordUnauthenticated audits a request refused at authentication (no, expired, forged or
// foreign token). Nothing of the token is recorded: reason is the verifier's code.
func (g *Gateway) RecordUnauthenticated(ctx context.Context, route, reason string) (string, error) {
	rec := store.AuditRecord{
		ID: audit.NewID("unauth_"), Time: time.Now(), Ref: route, Decision: audit.DecisionUnauthenticated,
		Reasons:        reasonsJSON([]policy.Reason{{Code: CodeUnauthenticated, Detail: reason}}),
		BundleRevision: g.Policy.Revision(), Outcome: "not-run",
	}
	if err := g.Audit.Append(ctx, rec); err != nil {
		return "", unavailable(CodeAuditUnavailable, "audit log", err)
	}
	return rec.ID, nil
}

// obligationApproval is the obligation a decision carries when a person must approve the call.
const obligationApproval = "approval"

// policyInput is the call as the Rego sees it: only verified claims, never headers.
func policyInput(ec identity.ExecContext, ref, resource string) policy.Input {
	return policy.Input{
		Ref: ref, Subject: policy.Subject{Kind: ec.Subject.Kind, Ref: ec.Subject.Ref},
		Groups: ec.Groups, Roles: ec.Roles, OrgRole: ec.OrgRole, Org: ec.Org, Project: ec.Project,
		Session: ec.Session, Environment: ec.Environment, Resource: resource, Armed: ec.Armed,
	}
}

func summary(reasons []policy.Reason) string {
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = r.Code
	}
	return strings.Join(parts, ", ")
}

func mustJSON(v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return raw
}
