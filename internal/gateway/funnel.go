package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/explain"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/inputschema"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/outage"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/ratelimit"
	"github.com/xemahq/xema/internal/runner"
	"github.com/xemahq/xema/internal/spool"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/telemetry"
	"github.com/xemahq/xema/internal/txntoken"
	"github.com/xemahq/xema/internal/unauth"
	"go.opentelemetry.io/otel/attribute"
)

// call carries one invocation through the funnel and becomes its audit record.
type call struct {
	exec  identity.ExecContext
	req   Request
	start time.Time
	rec   store.AuditRecord
	// entry and decision are what admit found: the capability and the policy's decision.
	entry    *catalog.Entry
	decision policy.Decision
	// dispatching is RunApproved's hook between the decision record and the run.
	dispatching func(ctx context.Context) error
	// read is what the decision read of the call's connection (input.connection), carried
	// to the run.
	read any
	// reason is the first reason code of a denying decision (the metrics' reason label).
	reason string
	// dispatched is set as the call is handed to its runner: from then on it may have run.
	dispatched bool
}

// Invoke runs req for the caller ec through the whole funnel. Every outcome, allowed or not,
// is audited before Invoke returns. A call that ran, was refused or is held is a Result; an
// error is always a *fault.Error. One exception, as io.Reader's: a call that ran but whose
// outcome could not be recorded answers both its Result and the OUTCOME_NOT_RECORDED error.
// An error answered before the call was dispatched says so (fault.Error.NotRun).
func (g *Gateway) Invoke(ctx context.Context, ec identity.ExecContext, req Request) (*Result, error) {
	c := g.begin(ec, req)
	return c.settle(g.invoke(ctx, c))
}

func (g *Gateway) invoke(ctx context.Context, c *call) (*Result, error) {
	if res, err := g.admit(ctx, c); res != nil || err != nil {
		return res, err
	}
	if res, err := g.obligations(ctx, c); res != nil || err != nil {
		return res, err
	}
	return g.dispatch(ctx, c)
}

// settle marks an error answered before the call was dispatched as not run. It is the one
// place that decides it for the funnel, from where the call got to, so a refusal before the
// runner passes for one that did not run however new its code; after it, only the runner's
// own mark says so.
func (c *call) settle(res *Result, err error) (*Result, error) {
	var fe *fault.Error
	if !c.dispatched && errors.As(err, &fe) {
		fe.NotRun = true
	}
	return res, err
}

// codeOf is the typed code of a funnel error ("" for nil), for span status and metrics.
func codeOf(err error) string {
	var ge *fault.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &ge):
		return ge.Code
	}
	return fault.CodeInternal
}

// RunApproved runs a call a person has approved, as its requester: route, validate and
// authorize again under the policy serving now (a grant revoked meanwhile denies), then
// resolve and run, without counting limits or asking for approval a second time. Its
// records link to parentAuditID, the audit record of the original call. heldVersion is the
// biome version the call was held under, the one its approver was shown: when the org's
// grant routes the ref to another version now, the call is refused (VERSION_CHANGED) rather
// than run on code nobody approved. dispatching, when set, is called after the decision
// record and before the runner; its error stops the call (the approval was taken by another
// replica's recovery), recorded as not dispatched.
func (g *Gateway) RunApproved(ctx context.Context, ec identity.ExecContext, req Request, heldVersion, parentAuditID string,
	dispatching func(ctx context.Context) error) (*Result, error) {
	c := g.begin(ec, req)
	c.rec.ParentID = parentAuditID
	c.dispatching = dispatching
	// The run is the requester's: the approver's request, whose context this is, must lend
	// it neither their identity nor their bearer token.
	ctx = identity.WithCaller(ctx, ec)
	return c.settle(g.runApproved(ctx, c, heldVersion))
}

func (g *Gateway) runApproved(ctx context.Context, c *call, heldVersion string) (*Result, error) {
	if res, err := g.admit(ctx, c); res != nil || err != nil {
		return res, err
	}
	if now := c.entry.Capability.BiomeVersion; now != heldVersion {
		return nil, g.fail(ctx, c, audit.DecisionError, fault.New(fault.Conflict, CodeVersionChanged,
			"%s was held under %s %s and the org's grant now routes it to %s; the approved call did not run (call it again to have it held under %s)",
			c.req.Ref, c.entry.Capability.BiomeID, cmp.Or(heldVersion, "a version not recorded"), now, now))
	}
	return g.dispatch(ctx, c)
}

// Replay decides a retry under an idempotency key whose first call has its answer stored:
// route, validate and authorize again under the policy serving now, as that call would be
// today. A nil result and error mean the stored answer may be returned; the replay is then
// audited as its own record (outcome "replayed"). A refusal is audited and returned, never the
// stored answer. Every record links to parentAuditID, the first call's record. Limits are not
// counted and nothing runs: the replay returns an answer, it does not make a call.
func (g *Gateway) Replay(ctx context.Context, ec identity.ExecContext, req Request, parentAuditID string) (*Result, error) {
	c := g.begin(ec, req)
	c.rec.ID, c.rec.ParentID = audit.NewID("rpl_"), parentAuditID
	if res, err := g.admit(ctx, c); res != nil || err != nil {
		return res, err
	}
	return nil, g.record(ctx, c, audit.DecisionAllowed, OutcomeReplayed)
}

// OutcomeReplayed is the outcome of a replay's record: admitted again, the stored answer of
// its parent returned, nothing run.
const OutcomeReplayed = "replayed"

// admit is route → validate → authorize; every refusal is audited. A nil result and error
// admit the call, with c.entry and c.decision set.
func (g *Gateway) admit(ctx context.Context, c *call) (*Result, error) {
	entry, err := g.route(ctx, c)
	if err != nil {
		// No policy input will carry the verified context: the record keeps it as its detail.
		c.rec.Detail = mustJSON(c.exec)
		return nil, g.fail(ctx, c, audit.DecisionNotFound, err)
	}
	violations := g.validate(ctx, entry, c.req.Input)
	decision, err := g.authorize(ctx, c, entry, nil)
	if err != nil {
		return nil, g.fail(ctx, c, audit.DecisionError, err)
	}
	if !decision.Allow {
		return g.deny(ctx, c, g.denial(c, entry, decision))
	}
	if len(violations) > 0 {
		return nil, g.fail(ctx, c, audit.DecisionInvalid, invalidInput(violations))
	}
	c.entry, c.decision = entry, decision
	return nil, nil
}

// dispatch is resolve → run, with the decision recorded before the run.
func (g *Gateway) dispatch(ctx context.Context, c *call) (*Result, error) {
	entry := c.entry
	if c.read != nil {
		// Resolve and the runner use what the decision read (the connection, the binding),
		// not a second read.
		ctx = runner.WithDecided(ctx, c.read)
	}
	rctx, step := telemetry.Start(ctx, telemetry.StepResolve, telemetry.AttrRef.String(entry.Ref()))
	run, err := g.Resolve(rctx, c.exec, entry)
	if err != nil {
		step.End(codeOf(err))
		return nil, g.fail(ctx, c, audit.DecisionError, err)
	}
	step.End("", telemetry.AttrRunner.String(run.Kind()))
	if run.Kind() != "kernel" {
		release, err := g.d.Outbound.Acquire()
		if err != nil {
			return nil, g.fail(ctx, c, audit.DecisionError, err)
		}
		defer release()
		releaseProvider, err := g.d.PerProvider.Acquire(entry.Capability.BiomeID)
		if err != nil {
			return nil, g.fail(ctx, c, audit.DecisionError, err)
		}
		defer releaseProvider()
	}
	// The decision record says admitted, not dispatched: the outcome record, written after
	// the run, is the one that says how it ended.
	if err := g.record(ctx, c, audit.DecisionAllowed, OutcomeAdmitted); err != nil {
		return nil, err
	}
	if c.dispatching != nil {
		if err := c.dispatching(ctx); err != nil {
			g.closeUndispatched(ctx, c, run.Kind())
			return nil, err
		}
	}
	out, err := g.run(ctx, c, entry, run)
	if err != nil && !ranUnrecorded(err) {
		return nil, err
	}
	return &Result{Output: out, AuditID: c.rec.ID, Obligations: c.decision.Obligations}, err
}

func (g *Gateway) begin(ec identity.ExecContext, req Request) *call {
	c := &call{exec: ec, req: req, start: time.Now(), rec: store.AuditRecord{
		ID: audit.NewID("inv_"), Org: ec.Org, Ref: req.Ref,
		SubjectKind: ec.Subject.Kind, SubjectRef: ec.Subject.Ref, Environment: ec.Environment,
		InputHash: audit.InputHash(g.d.InputHashKey, req.Input), BundleRevision: g.d.Policy.Revision(),
	}}
	c.rec.Detail = c.detail(nil)
	return c
}

// detail is the records' detail: every record of a delegated call, outcome records too,
// names the person and the actor chain (the subject columns hold the actor), and of a call
// served through a connection, that connection.
func (c *call) detail(conn *policy.Connection) json.RawMessage {
	var d *audit.OnBehalfOf
	if del := c.exec.Delegation; del != nil {
		d = &audit.OnBehalfOf{Person: audit.Subject{Kind: del.Person.Kind, Ref: del.Person.Ref}, Actors: del.Actors}
	}
	var used *audit.Connection
	if conn != nil {
		used = &audit.Connection{ID: conn.ID, Provider: conn.Provider, Owner: conn.Owner, Person: conn.Person, Status: conn.Status}
	}
	return audit.CallDetail(d, used)
}

// route finds the catalog entry; an unknown ref is a 404.
func (g *Gateway) route(ctx context.Context, c *call) (*catalog.Entry, error) {
	_, step := telemetry.Start(ctx, telemetry.StepRoute)
	entry, ok := g.d.Catalog.Snapshot().For(c.exec.Org, c.req.Ref)
	if !ok {
		// The ref is the caller's text: not an attribute until the catalog knows it.
		step.End(CodeUnknownCapability)
		return nil, UnknownCapability(c.req.Ref)
	}
	step.End("", telemetry.AttrRef.String(entry.Ref()))
	return entry, nil
}

// validate checks the input strictly. Violations are only reported after the policy has
// admitted the caller, so a denied caller learns nothing of the schema.
func (g *Gateway) validate(ctx context.Context, entry *catalog.Entry, input json.RawMessage) []inputschema.Violation {
	_, step := telemetry.Start(ctx, telemetry.StepValidate, telemetry.AttrRef.String(entry.Ref()))
	v := entry.Input.Validate(input)
	step.End("", attribute.Int("xema.violations", len(v)))
	return v
}

// authorize asks the embedded OPA for the decision, with the counting state of the rate
// limiter when it has refused the call. No decision means deny (fail closed).
func (g *Gateway) authorize(ctx context.Context, c *call, entry *catalog.Entry, usage *policy.Usage) (policy.Decision, error) {
	in := PolicyInput(c.exec, entry.Ref(), entry.Resource(c.req.Input))
	in.Usage = usage
	_, step := telemetry.Start(ctx, telemetry.StepAuthorize, telemetry.AttrRef.String(entry.Ref()))
	conn, read, err := g.connection(ctx, c.exec, entry)
	if err != nil {
		step.End(fault.CodeStoreUnavailable)
		return policy.Decision{}, err
	}
	in.Connection, c.read = conn, read
	if conn != nil {
		c.rec.Detail = c.detail(conn)
	}
	d, err := g.d.Policy.Decide(ctx, in)
	if err != nil {
		step.End(CodePolicyUnavailable)
		g.d.Outages.Failed(outage.Policy, err)
		return policy.Decision{}, Unavailable(CodePolicyUnavailable, outage.Policy)
	}
	g.d.Outages.OK(outage.Policy)
	verdict, reason := "allow", ""
	if !d.Allow {
		verdict = "deny"
	}
	if len(d.Reasons) > 0 {
		reason = d.Reasons[0].Code
	}
	if !d.Allow {
		c.reason = reason
	}
	step.End("", telemetry.AttrDecision.String(verdict), telemetry.AttrReason.String(reason))
	c.rec.PolicyInput = mustJSON(in) // for replay: the verified context, never the raw input
	c.rec.Reasons = reasonsJSON(d.Reasons)
	c.rec.Suggestions = reasonsJSON(d.Suggestions)
	c.rec.Obligations = reasonsJSON(d.Obligations)
	return d, nil
}

func (g *Gateway) denial(c *call, e *catalog.Entry, d policy.Decision) *Denial {
	c.rec.ID = audit.NewID("deny_")
	// The record keeps the suggestions the caller is told (why-denied explains from them).
	x := explain.Of(explain.For(e, policy.Subject{Kind: c.exec.Subject.Kind, Ref: c.exec.Subject.Ref}, c.exec.Environment, d))
	c.rec.Suggestions = reasonsJSON(x.Suggestions)
	rec := c.rec
	rec.Decision = audit.DecisionDenied
	den, _ := audit.WhyDenied(rec)
	return &Denial{Denial: explain.Deny(den, x), Code: CodeDenied, Message: fmt.Sprintf("%s denied: %s", c.req.Ref, summary(d.Reasons))}
}

// deny audits a refused call and answers its denial.
func (g *Gateway) deny(ctx context.Context, c *call, d *Denial) (*Result, error) {
	if err := g.record(ctx, c, audit.DecisionDenied, d.Code); err != nil {
		return nil, err
	}
	return &Result{AuditID: c.rec.ID, Denial: d}, nil
}

// obligations enforces what an allowing decision demands before the call may run: the
// rate limits and quotas are counted (over them the policy, told the usage, names the
// denial), then a call that needs a person's approval is held instead of run. A nil result
// and error let the call run.
func (g *Gateway) obligations(ctx context.Context, c *call) (res *Result, err error) {
	obs := c.decision.Obligations
	ctx, step := telemetry.Start(ctx, telemetry.StepObligations, telemetry.AttrRef.String(c.entry.Ref()))
	defer func() { step.End(cmp.Or(res.code(), codeOf(err)), attribute.Int("xema.obligations", len(obs))) }()
	if g.d.Limiter != nil {
		key := ratelimit.Key{Org: c.exec.Org, Ref: c.entry.Ref(), Subject: c.exec.Subject.Ref, Environment: c.exec.Environment}
		usage, err := g.d.Limiter.Take(ctx, key, obs)
		if err != nil {
			g.d.Outages.Failed(outage.RateLimiter, err)
			return nil, g.fail(ctx, c, audit.DecisionError, Unavailable(fault.CodeStoreUnavailable, outage.RateLimiter))
		}
		g.d.Outages.OK(outage.RateLimiter)
		if usage != nil {
			return g.limited(ctx, c, usage)
		}
	}
	for _, o := range obs {
		if o.Kind == ObligationApproval {
			return g.hold(ctx, c)
		}
	}
	return nil, nil
}

// limited denies a call over a limit with 429, the reasons of the policy told the usage,
// and the seconds until the limit's window ends.
func (g *Gateway) limited(ctx context.Context, c *call, u *policy.Usage) (*Result, error) {
	d, err := g.authorize(ctx, c, c.entry, u)
	if err != nil {
		return nil, g.fail(ctx, c, audit.DecisionError, err)
	}
	den := g.denial(c, c.entry, d)
	den.Limited, den.Code, den.RetryAfter = true, ratelimit.CodeRateLimited, u.RetryAfterSeconds
	if u.QuotaExceeded {
		den.Code = ratelimit.CodeQuotaExceeded
	}
	return g.deny(ctx, c, den)
}

// hold records the call as pending approval, then stores it with its validated input. The
// queue admits it first (a refusal stores nothing but its audit record), then the audit
// record comes: a call whose request is not audited is never held, so never run. A call
// identical to one its requester has pending joins that one: its record links to the held
// call's, and it is answered that call's approval.
func (g *Gateway) hold(ctx context.Context, c *call) (*Result, error) {
	if g.d.Approvals == nil {
		return nil, g.fail(ctx, c, audit.DecisionError, fault.New(fault.Unavailable, CodeApprovalUnavailable, "this call requires a human approval and no approval queue is configured"))
	}
	p := Pending{ID: audit.RandomID("apr_"), AuditID: c.rec.ID, Ref: c.entry.Ref(), Biome: c.entry.Capability.BiomeID,
		BiomeVersion: c.entry.Capability.BiomeVersion, RiskTier: c.entry.Manifest.RiskTier,
		PolicyRevision: c.rec.BundleRevision, Exec: c.exec, Input: c.req.Input}
	joined, release, err := g.d.Approvals.Admit(ctx, p)
	var refused *fault.Error
	switch {
	case errors.As(err, &refused):
		return nil, g.fail(ctx, c, audit.DecisionDenied, refused)
	case err != nil:
		g.d.Outages.Failed(outage.ApprovalStore, err)
		return nil, g.fail(ctx, c, audit.DecisionError, Unavailable(fault.CodeStoreUnavailable, outage.ApprovalStore))
	}
	defer release()
	if joined != nil {
		c.rec.ParentID = joined.AuditID
	}
	if err := g.record(ctx, c, audit.DecisionPendingApproval, CodePendingApproval); err != nil {
		return nil, err
	}
	if joined == nil {
		if joined, err = g.d.Approvals.Hold(ctx, p); err != nil {
			g.d.Outages.Failed(outage.ApprovalStore, err)
			e := Unavailable(fault.CodeStoreUnavailable, outage.ApprovalStore)
			e.AuditID = c.rec.ID
			return nil, e
		}
	}
	return &Result{AuditID: c.rec.ID, Held: newHeld(c.rec.ID, p.ID, joined)}, nil
}

// Resolve picks the runner serving the entry: a declared invocation, a live kernel handler,
// or a resolver (bindings, federated servers). Publishing guaranteed exactly one way; none
// at call time is a typed error, never a fallback.
func (g *Gateway) Resolve(ctx context.Context, ec identity.ExecContext, entry *catalog.Entry) (runner.Runner, error) {
	if inv := entry.Invocation; inv != nil && inv.Kind == "http" {
		return runner.HTTP{Client: g.d.HTTP, URL: inv.URL, Timeout: time.Duration(inv.TimeoutMs) * time.Millisecond, Tokens: g.d.Tokens}, nil
	}
	if h, ok := g.d.Kernel.Handler(entry.Ref()); ok {
		return runner.Kernel{Handler: h}, nil
	}
	for _, r := range g.d.Resolvers {
		run, ok, err := r.Resolve(ctx, ec, entry)
		if err != nil {
			return nil, err
		}
		if ok {
			return run, nil
		}
	}
	return nil, fault.New(fault.Provider, CodeNoRunner, "%s has no runner in this environment", entry.Ref())
}

// closeUndispatched writes the outcome record of an admitted call that never reached its
// runner, so its decision record is not left open.
func (g *Gateway) closeUndispatched(ctx context.Context, c *call, kind string) {
	outcome := c.rec
	outcome.ParentID, outcome.ID, outcome.PolicyInput = c.rec.ID, audit.OutcomeID(c.rec.ID), nil
	outcome.Runner, outcome.Outcome, outcome.Time = kind, OutcomeNotDispatched, time.Now()
	if err := g.appendAudit(context.WithoutCancel(ctx), outcome); err != nil {
		g.d.Spool.Add(spool.Entry{Audit: &outcome})
	}
}

// run executes the call and appends its outcome, linked to the decision record. A
// provider's output is checked against the capability's output schema before it is passed
// on: a violation is the typed 502 INVALID_OUTPUT and the output is dropped. A shutdown past
// its deadline (AbortRuns) cuts the run off: the outcome says interrupted. When the outcome
// cannot be recorded the answer says the call ran, and the outcome is spooled.
func (g *Gateway) run(ctx context.Context, c *call, entry *catalog.Entry, r runner.Runner) (json.RawMessage, error) {
	c.rec.Runner = r.Kind()
	rs := g.runs()
	rs.add()
	defer rs.done()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(rs.ctx, cancel)
	defer stop()
	rctx, step := telemetry.Start(runCtx, telemetry.StepRun, telemetry.AttrRef.String(entry.Ref()),
		telemetry.AttrRunner.String(r.Kind()), telemetry.AttrAuditID.String(c.rec.ID))
	envelope, err := g.envelope(c, entry, r)
	if err != nil {
		step.End(CodeTxnTokenFailed)
		g.closeUndispatched(ctx, c, r.Kind())
		fe := fault.Of(err)
		fe.AuditID = c.rec.ID
		return nil, fe
	}
	began := time.Now()
	c.dispatched = true
	out, runErr := r.Run(rctx, kernel.Call{Ref: c.req.Ref, Input: c.req.Input, Exec: c.exec, AuditID: c.rec.ID, TxnToken: envelope})
	if runErr == nil {
		if v := checkOutput(entry, r.Kind(), out); len(v) > 0 {
			runErr = invalidOutput(c.req.Ref, v)
		}
	}
	runCode := ""
	if runErr != nil {
		runCode = providerError(runErr).Code
	}
	telemetry.Provider(r.Kind(), cmp.Or(runCode, "ok"), time.Since(began).Seconds())
	step.End(runCode, telemetry.AttrOutcome.String(cmp.Or(runCode, "ok")))
	outcome := c.rec
	outcome.ParentID, outcome.ID, outcome.PolicyInput = c.rec.ID, audit.OutcomeID(c.rec.ID), nil
	outcome.Outcome = "ok"
	var answer *fault.Error
	switch {
	case runErr != nil && rs.ctx.Err() != nil:
		slog.WarnContext(ctx, "run cut off by shutdown", "ref", c.req.Ref, "auditId", c.rec.ID, "runner", r.Kind())
		answer = interrupted(c.rec.ID)
		outcome.Outcome = CodeInterrupted
	case runErr != nil:
		// The internal error (a handler's Go error, a dial error) goes to the log with the
		// auditId; the caller gets the typed code and the runner's fixed message.
		slog.WarnContext(ctx, "run failed", "ref", c.req.Ref, "auditId", c.rec.ID, "runner", r.Kind(), "err", runErr)
		answer = providerError(runErr)
		outcome.Outcome = answer.Code
	}
	outcome.LatencyMicros = time.Since(c.start).Microseconds()
	outcome.Time = time.Now()
	// The run happened: its outcome is written even if the caller has gone.
	if err := g.appendAudit(context.WithoutCancel(ctx), outcome); err != nil {
		g.d.Outages.Failed(outage.AuditLog, err)
		spooled := g.d.Spool.Add(spool.Entry{Audit: &outcome})
		return out, outcomeNotRecorded(c.rec.ID, outcome.Outcome, spooled)
	}
	g.d.Outages.OK(outage.AuditLog)
	if answer != nil {
		answer.AuditID = c.rec.ID
		return nil, answer
	}
	return out, nil
}

// checkOutput validates a provider's output against the entry's output schema. Kernel
// handlers are the gateway's own code (their outputs are tested with it) and are not checked;
// an entry without a declared output schema is not checked either.
func checkOutput(entry *catalog.Entry, kind string, out json.RawMessage) []inputschema.Violation {
	if entry == nil || entry.Output == nil || kind == "kernel" {
		return nil
	}
	return entry.Output.Validate(out)
}

func providerError(err error) *fault.Error {
	var oe *outputError
	if errors.As(err, &oe) {
		return oe.answer
	}
	var re *fault.Error
	if !errors.As(err, &re) {
		re = fault.New(fault.Internal, runner.CodeHandlerFailed, "the runner failed")
	}
	kind := re.Kind
	switch {
	case re.Code == runner.CodeProviderTimeout:
		kind = fault.Timeout // every runner: http, connector, mcp-external
	case re.Code == runner.CodeNoToken:
		kind = fault.Unavailable
	case kind == fault.Internal: // a runner's failure that names no kind is its provider's
		kind = fault.Provider
	}
	v, total := capViolations(re.Violations)
	return &fault.Error{Kind: kind, Code: re.Code, Message: re.Message, ProviderStatus: re.ProviderStatus, Violations: v,
		ViolationCount: max(total, re.ViolationCount), ProviderBody: re.ProviderBody, ProviderBodyTruncated: re.ProviderBodyTruncated,
		NotRun: re.NotRun}
}

// fail audits a call that ends before running and returns the answer for the caller.
func (g *Gateway) fail(ctx context.Context, c *call, decision string, err error) error {
	ge := fault.Of(err)
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
	if err := g.appendAudit(ctx, c.rec); err != nil {
		return g.auditUnavailable(err)
	}
	g.d.Outages.OK(outage.AuditLog)
	ref, reason := c.req.Ref, c.reason
	if decision == audit.DecisionNotFound {
		ref = telemetry.UnknownRef
	}
	if reason == "" && decision != audit.DecisionAllowed {
		reason = outcome
	}
	telemetry.Decision(ref, decision, reason)
	return nil
}

// auditUnavailable reports the audit log's failure and refuses what needed the record.
func (g *Gateway) auditUnavailable(err error) *fault.Error {
	g.d.Outages.Failed(outage.AuditLog, err)
	return Unavailable(CodeAuditUnavailable, outage.AuditLog)
}

// appendAudit is the audit step: one record appended (and committed) to the audit log.
func (g *Gateway) appendAudit(ctx context.Context, rec store.AuditRecord) error {
	ctx, step := telemetry.Start(ctx, telemetry.StepAudit, telemetry.AttrAuditID.String(rec.ID),
		telemetry.AttrDecision.String(rec.Decision), telemetry.AttrOutcome.String(rec.Outcome))
	err := g.d.Audit.Append(ctx, rec)
	if err != nil {
		step.End(CodeAuditUnavailable)
		return err
	}
	step.End("")
	return nil
}

// RecordUnauthenticated audits a request refused at authentication (no, expired, forged or
// foreign token) from source (the peer's address). Nothing of the token is recorded: reason is
// the verifier's code. With Unauth set the attempt is counted into an aggregate record (a
// flood adds a bounded number of rows); without, it is one record of its own.
func (g *Gateway) RecordUnauthenticated(ctx context.Context, route, reason, source string) (string, error) {
	// route is the router's pattern (or /mcp), never the caller's path: a bounded label.
	telemetry.Decision(route, audit.DecisionUnauthenticated, reason)
	if g.d.Unauth != nil {
		id, err := g.d.Unauth.Record(ctx, route, reason, source)
		if err != nil {
			return "", g.auditUnavailable(err)
		}
		return id, nil
	}
	rec := store.AuditRecord{
		ID: audit.NewID("unauth_"), Time: time.Now(), Ref: route, Decision: audit.DecisionUnauthenticated,
		Reasons: unauth.Reasons(reason), BundleRevision: g.d.Policy.Revision(), Outcome: "not-run",
	}
	if err := g.appendAudit(ctx, rec); err != nil {
		return "", g.auditUnavailable(err)
	}
	return rec.ID, nil
}

// Connection is input.connection of a call of ec to entry (nil for a capability served
// through no connection). A store that cannot say is a typed 503 (fail closed).
func (g *Gateway) Connection(ctx context.Context, ec identity.ExecContext, entry *catalog.Entry) (*policy.Connection, error) {
	conn, _, err := g.connection(ctx, ec, entry)
	return conn, err
}

// connection is Connection with what it was read from, for the run of the same call.
func (g *Gateway) connection(ctx context.Context, ec identity.ExecContext, entry *catalog.Entry) (*policy.Connection, any, error) {
	if g.d.Connections == nil {
		return nil, nil, nil
	}
	conn, read, err := g.d.Connections.Connection(ctx, ec, entry)
	if err != nil {
		var fe *fault.Error
		if errors.As(err, &fe) {
			return nil, nil, fe
		}
		slog.WarnContext(ctx, "connection status unavailable", "ref", entry.Ref(), "err", err)
		return nil, nil, fault.New(fault.Unavailable, fault.CodeStoreUnavailable, "the connection of %s could not be read; the call was denied (fail closed)", entry.Ref())
	}
	return conn, read, nil
}

// PolicyInput is the call as the Rego sees it: only verified claims, never headers.
func PolicyInput(ec identity.ExecContext, ref, resource string) policy.Input {
	in := policy.Input{
		Ref: ref, Subject: policy.Subject{Kind: ec.Subject.Kind, Ref: ec.Subject.Ref},
		Groups: ec.Groups, Roles: ec.Roles, OrgRole: ec.OrgRole, Org: ec.Org, Project: ec.Project,
		Session: ec.Session, Environment: ec.Environment, Resource: resource, Armed: ec.Armed,
	}
	if d := ec.Delegation; d != nil {
		in.Delegation = &policy.Delegation{Person: policy.Subject{Kind: d.Person.Kind, Ref: d.Person.Ref}, OrgRole: d.OrgRole,
			Groups: d.Groups, Roles: d.Roles, Actors: d.Actors, MayAct: d.MayAct}
	}
	return in
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

// envelope is the Txn-Token of a call whose capability declares the critical-operation
// projection ("" for others): the trusted context signed for its provider. A capability that
// asks for one and cannot get it does not run (fail closed).
func (g *Gateway) envelope(c *call, entry *catalog.Entry, r runner.Runner) (string, error) {
	p := entry.Manifest.TrustedContextProjection
	if p == nil || p.Profile != txntoken.Profile || p.Delivery != txntoken.Delivery {
		return "", nil
	}
	if g.d.TxnTokens == nil {
		return "", fault.New(fault.Unavailable, CodeTxnTokenFailed, "%s needs a signed trusted context and this gateway has no Txn-Token key", c.req.Ref)
	}
	carrier, ok := r.(interface{ Audience() string })
	if !ok {
		return "", fault.New(fault.Provider, CodeTxnTokenFailed, "%s declares a signed trusted context, which its %s runner cannot carry (an http invocation can)", c.req.Ref, r.Kind())
	}
	principal := c.exec.Principal()
	call := txntoken.Call{AuditID: c.rec.ID, Subject: principal.Ref, Audience: carrier.Audience(), Ref: c.req.Ref,
		Context: txntoken.Context{Org: c.exec.Org, Environment: c.exec.Environment, InputHash: txntoken.InputHash(c.req.Input),
			RiskTier: entry.Manifest.RiskTier, Approval: c.req.Approval}}
	if d := c.exec.Delegation; d != nil {
		call.Actors = d.Actors
	}
	tok, err := g.d.TxnTokens.Sign(call, time.Now())
	if err != nil {
		return "", fault.Wrap(err, fault.Internal, CodeTxnTokenFailed, "the gateway could not sign the trusted context of %s", c.req.Ref)
	}
	return tok, nil
}
