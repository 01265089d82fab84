// Package approval is human approval of calls whose decision carries the approval
// obligation. The gateway holds such a call (Service.Hold) with its validated input; a person
// approves or rejects it through kernel capabilities (approval:approve@1, approval:reject@1,
// approval:list@1), so the same policy and audit cover them. Who may approve is decided by
// the policy: the approver must hold the held capability themselves (its humanBaseline:
// org role and environments, org administrators, explicit-only grants) and never be its
// requester. An approved call runs at most once: each state change is a compare-and-set
// in the store (pending → approved → running → dispatched → done), shared by every replica,
// and approved/running/dispatched are held under a lease so a crash never leaves one stuck
// (Recover; docs/approvals.md).
package approval

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	"github.com/xemahq/xema/internal/answer"
	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/spool"
	"github.com/xemahq/xema/internal/store"
)

// Refs of the approval capabilities.
const (
	RefList    = "approval:list@1"
	RefApprove = "approval:approve@1"
	RefReject  = "approval:reject@1"
)

// Error codes of the approval steps.
const (
	CodeNotFound       = "APPROVAL_NOT_FOUND"
	CodeExpired        = "APPROVAL_EXPIRED"
	CodeAlreadyDecided = "APPROVAL_ALREADY_DECIDED"
	CodeNotApprover    = "NOT_AN_APPROVER"
	// Reason codes of the policy (policies/approval.rego), answered as the step's code.
	CodeOwnApproval      = "OWN_APPROVAL"
	CodeApproverNotHuman = "APPROVER_NOT_HUMAN"
	// Ends of a held call that never ran, as its requester's task and idempotent retry answer
	// them (CodeExpired too).
	CodeRejected  = "APPROVAL_REJECTED"
	CodeWithdrawn = "APPROVAL_WITHDRAWN"
)

// Audit decisions of the approval steps; their records link to the held call's auditId.
const (
	DecisionApproved = "approved"
	DecisionRejected = "rejected"
	DecisionExpired  = "expired"
	// DecisionWithdrawn: its requester cancelled the call while it was pending.
	DecisionWithdrawn = "withdrawn"
	// DecisionRecovered: an approval whose holder stopped before dispatching it went back to
	// pending; DecisionInterrupted: one it had dispatched ended interrupted.
	DecisionRecovered   = "recovered"
	DecisionInterrupted = "interrupted"
)

// Outcomes recovery writes.
const (
	OutcomeRecovered = "RECOVERED_NOT_DISPATCHED"
	OutcomeUnknown   = "OUTCOME_UNKNOWN"
)

// Leases: how long a replica holds an approval it moves. LeaseApproved covers the moment
// between the approval and the claim to run; LeaseRun a whole run (longer than the largest
// timeoutMs, 120 s). A replica restarting recovers its own approvals at once, whatever their
// lease; another replica's only once its lease has ended.
const (
	LeaseApproved = time.Minute
	LeaseRun      = 5 * time.Minute
)

// DefaultTTL is how long a held call waits for a decision before it expires.
const DefaultTTL = 24 * time.Hour

//go:embed contributions/*.json
var descriptors embed.FS

// Contributions are the kernel capabilities' descriptors (contributions/*.json): the OpenAPI
// document takes their inputSchema and outputSchema as the routes' bodies.
var Contributions fs.FS = descriptors

// Queue stores the calls the gateway holds (gateway.ApprovalQueue). It needs only the store,
// so the gateway is built on it, and the Service that runs approved calls on the gateway:
// each part is built once, in order.
type Queue struct {
	Store interface {
		PutApproval(ctx context.Context, a store.Approval) error
	}
	// TTL is how long a held call may wait; 0 means DefaultTTL.
	TTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

var _ gateway.ApprovalQueue = (*Queue)(nil)

// Hold stores the call, pending, until it expires.
func (q *Queue) Hold(ctx context.Context, p gateway.Pending) error {
	exec, err := json.Marshal(p.Exec)
	if err != nil {
		return fmt.Errorf("hold %s: encode execution context: %w", p.Ref, err)
	}
	now, ttl := time.Now(), cmp.Or(q.TTL, DefaultTTL)
	if q.Now != nil {
		now = q.Now()
	}
	return q.Store.PutApproval(ctx, store.Approval{ID: p.ID, Org: p.Exec.Org, AuditID: p.AuditID, Ref: p.Ref, Biome: p.Biome,
		RequesterRef: p.Exec.Subject.Ref, Environment: p.Exec.Environment, Exec: exec, Input: p.Input,
		Status: store.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(ttl)})
}

// Runner runs an approved call through the funnel again, as its requester (gateway.Gateway).
type Runner interface {
	RunApproved(ctx context.Context, ec identity.ExecContext, req gateway.Request, parentAuditID string,
		dispatching func(ctx context.Context) error) (*gateway.Result, error)
}

// Service decides and runs calls waiting for approval.
type Service struct {
	Store  store.Store
	Policy *policy.Engine
	Runner Runner
	Audit  *audit.Log
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Replica names this gateway process's claims (stable across its restarts); "" means
	// "local".
	Replica string
	// Spool keeps an approval's end when the store cannot take it.
	Spool *spool.Spool
}

func (s *Service) replica() string {
	if s.Replica != "" {
		return s.Replica
	}
	return "local"
}

// View is the public shape of a held call.
type View struct {
	ApprovalID  string          `json:"approvalId"`
	AuditID     string          `json:"auditId"`
	Ref         string          `json:"ref"`
	Biome       string          `json:"biome,omitempty"`
	Requester   string          `json:"requester"`
	Environment string          `json:"environment"`
	Status      string          `json:"status"`
	Input       json.RawMessage `json:"input,omitempty"`
	DecidedBy   string          `json:"decidedBy,omitempty"`
	Reason      string          `json:"reason,omitempty"`
	Outcome     string          `json:"outcome,omitempty"`
	Output      json.RawMessage `json:"output,omitempty"`
	CreatedAt   string          `json:"createdAt"`
	ExpiresAt   string          `json:"expiresAt"`
}

func view(a store.Approval, withOutput bool) View {
	v := View{ApprovalID: a.ID, AuditID: a.AuditID, Ref: a.Ref, Biome: a.Biome, Requester: a.RequesterRef,
		Environment: a.Environment, Status: a.Status, Input: a.Input, DecidedBy: a.DecidedBy, Reason: a.Reason,
		Outcome: a.Outcome, CreatedAt: a.CreatedAt.Format(time.RFC3339Nano), ExpiresAt: a.ExpiresAt.Format(time.RFC3339Nano)}
	if withOutput {
		v.Output = a.Output
	}
	return v
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Register queues the approval capabilities on reg, served by s.
func Register(reg *kernel.Registry, s *Service) error {
	handlers := map[string]kernel.Handler{
		"contributions/approval-list.json":    s.list,
		"contributions/approval-approve.json": s.approve,
		"contributions/approval-reject.json":  s.reject,
	}
	return reg.RegisterFiles(descriptors, handlers)
}

// listInput is the input of approval:list@1.
type listInput struct {
	Status    string `json:"status"`
	Biome     string `json:"biome"`
	Ref       string `json:"ref"`
	Requester string `json:"requester"`
}

// list serves approval:list@1; the policy has admitted only org administrators.
func (s *Service) list(ctx context.Context, call kernel.Call) (any, error) {
	var in listInput
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return nil, fmt.Errorf("decode validated input: %w", err)
	}
	as, err := s.Store.ListApprovals(ctx, store.ApprovalFilter{Org: call.Exec.Org, Status: in.Status, Biome: in.Biome, Ref: in.Ref, RequesterRef: in.Requester})
	if err != nil {
		return nil, unavailable(err)
	}
	views := make([]View, len(as))
	for i, a := range as {
		views[i] = view(a, false)
	}
	return map[string]any{"approvals": views}, nil
}

// decision is the input of approval:approve@1 and approval:reject@1.
type decision struct {
	ApprovalID string `json:"approvalId"`
	Reason     string `json:"reason"`
}

// approve serves approval:approve@1: the call moves pending → approved (at most once, and
// never once expired), then approved → running, runs as its requester, and ends done or
// failed with its outcome. Only the winner of the first move runs it.
func (s *Service) approve(ctx context.Context, call kernel.Call) (any, error) {
	a, err := s.decidable(ctx, call)
	if err != nil {
		return nil, err
	}
	approver, me := call.Exec.Subject.Ref, s.replica()
	a, err = s.move(ctx, a, store.ApprovalTransition{From: store.ApprovalPending, To: store.ApprovalApproved,
		Live: true, DecidedBy: approver, Claim: me, LeaseUntil: s.now().Add(LeaseApproved)})
	if err != nil {
		return nil, err
	}
	if err := s.audit(ctx, a, call.Exec, DecisionApproved, call.AuditID); err != nil {
		return nil, err
	}
	if a, err = s.move(ctx, a, store.ApprovalTransition{From: store.ApprovalApproved, To: store.ApprovalRunning,
		Holder: me, LeaseUntil: s.now().Add(LeaseRun)}); err != nil {
		return nil, err
	}
	return view(s.run(ctx, a), false), nil
}

// run runs an approved call and records how it ended. The run's own audit records link to
// the held call's auditId (gateway.RunApproved). Right before the runner (after the run's
// decision record) the approval moves running → dispatched: recovery sends a running one
// back to pending (it never reached its provider) and ends a dispatched one interrupted.
func (s *Service) run(ctx context.Context, a store.Approval) store.Approval {
	me := s.replica()
	end := store.ApprovalTransition{From: store.ApprovalRunning, To: store.ApprovalDone, Outcome: "ok", Holder: me}
	dispatching := func(ctx context.Context) error {
		if _, err := s.move(ctx, a, store.ApprovalTransition{From: store.ApprovalRunning, To: store.ApprovalDispatched, Holder: me}); err != nil {
			return err
		}
		end.From = store.ApprovalDispatched
		return nil
	}
	var exec identity.ExecContext
	if err := json.Unmarshal(a.Exec, &exec); err != nil {
		end.To, end.Outcome = store.ApprovalFailed, "INVALID_EXEC_CONTEXT"
	} else {
		res, err := s.Runner.RunApproved(ctx, exec, gateway.Request{Ref: a.Ref, Input: a.Input}, a.AuditID, dispatching)
		ended(&end, res, err)
		ans, _ := answer.Of(res, err)
		end.Answer, _ = json.Marshal(storedAnswer{Status: ans.Status, Body: ans.Body}) // a status and a JSON body encode
	}
	// The run happened: its end is recorded even if the approver's request was cancelled,
	// and spooled if the store cannot take it now (a running one still never dispatched is
	// left to recovery: its lease ends).
	done, err := s.move(context.WithoutCancel(ctx), a, end)
	if err != nil {
		var re *fault.Error
		if end.From == store.ApprovalDispatched && errors.As(err, &re) && re.Code == gateway.CodeStoreUnavailable {
			t := end
			t.ID, t.At = a.ID, s.now()
			s.Spool.Add(spool.Entry{Approval: &t})
		}
		a.Status, a.Outcome = end.To, end.Outcome
		return a
	}
	return done
}

// ended sets how the run of an approved call ended from RunApproved's answer: done with its
// output when it ran (even if its outcome record failed), failed when the policy refused it
// now (a grant revoked meanwhile) or it failed, interrupted when a shutdown cut it off.
func ended(end *store.ApprovalTransition, res *gateway.Result, err error) {
	var ge *fault.Error
	switch {
	case res != nil && res.Denial != nil:
		end.To, end.Outcome = store.ApprovalFailed, res.Denial.Code
	case res != nil: // it ran; an OUTCOME_NOT_RECORDED error does not change that
		end.Output = res.Output
	case errors.As(err, &ge) && ge.Code == gateway.CodeOutcomeNotRecorded: // it ran and failed: the approval tells how
		end.To, end.Outcome = store.ApprovalFailed, ge.Outcome
	case errors.As(err, &ge) && ge.Code == gateway.CodeInterrupted:
		end.To, end.Outcome = store.ApprovalInterrupted, ge.Code
	case err != nil:
		end.To, end.Outcome = store.ApprovalFailed, codeOf(err)
	}
}

// Recover ends every approval left in flight by a replica that is gone: this one's own
// (it has just started, so none of them is running here) and any whose lease has ended. One
// never dispatched goes back to pending, so a person can approve it again; one dispatched
// ends interrupted (it may have reached its provider, and is never run again). It returns
// how many it moved. Call it once, at start; RecoverLeases is the periodic one.
func (s *Service) Recover(ctx context.Context) (int, error) { return s.recover(ctx, s.replica()) }

// RecoverLeases ends only the approvals whose lease has ended: this replica's own live ones
// (running or dispatched here now) are left to it.
func (s *Service) RecoverLeases(ctx context.Context) (int, error) { return s.recover(ctx, "") }

func (s *Service) recover(ctx context.Context, holder string) (int, error) {
	moved := 0
	for {
		stale, err := s.Store.StaleApprovals(ctx, holder, s.now(), 100)
		if err != nil {
			return moved, fmt.Errorf("recover approvals: %w", err)
		}
		progress := false
		for _, a := range stale {
			t := store.ApprovalTransition{ID: a.ID, From: a.Status, To: store.ApprovalPending, At: s.now(), Holder: a.ClaimedBy,
				Reset: true, Outcome: OutcomeRecovered}
			decision := DecisionRecovered
			if a.Status == store.ApprovalDispatched {
				t.To, t.Reset, t.Outcome, decision = store.ApprovalInterrupted, false, OutcomeUnknown, DecisionInterrupted
			}
			to, err := s.Store.TransitionApproval(ctx, t)
			if errors.Is(err, store.ErrConflict) {
				continue // its holder, or another replica's recovery, moved it meanwhile
			}
			if err != nil {
				return moved, fmt.Errorf("recover approval %s: %w", a.ID, err)
			}
			progress = true
			moved++
			if err := s.audit(ctx, to, identity.ExecContext{Subject: identity.Subject{Kind: "service", Ref: "service:xema"}},
				decision, ""); err != nil {
				return moved, err
			}
		}
		if len(stale) < 100 || !progress {
			return moved, nil
		}
	}
}

// reject serves approval:reject@1: pending → rejected, with the reason (required by the
// input schema).
func (s *Service) reject(ctx context.Context, call kernel.Call) (any, error) {
	a, err := s.decidable(ctx, call)
	if err != nil {
		return nil, err
	}
	var in decision
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return nil, fmt.Errorf("decode validated input: %w", err)
	}
	a, err = s.move(ctx, a, store.ApprovalTransition{From: store.ApprovalPending, To: store.ApprovalRejected,
		DecidedBy: call.Exec.Subject.Ref, Reason: in.Reason})
	if err != nil {
		return nil, err
	}
	if err := s.audit(ctx, a, call.Exec, DecisionRejected, call.AuditID); err != nil {
		return nil, err
	}
	return view(a, false), nil
}

// decidable loads the approval named by the call's input and asks the policy whether the
// caller may decide it: of its org, holding the held capability, a person, and not its
// requester (input.approval, policies/approval.rego). Another org's approval, and one the
// caller is no approver of, is answered as an unknown id.
func (s *Service) decidable(ctx context.Context, call kernel.Call) (store.Approval, error) {
	var in decision
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return store.Approval{}, fmt.Errorf("decode validated input: %w", err)
	}
	notFound := fault.New(fault.NotFound, CodeNotFound, "no approval %q", in.ApprovalID)
	a, err := s.Store.GetApproval(ctx, in.ApprovalID)
	if errors.Is(err, store.ErrNotFound) || err == nil && a.Org != call.Exec.Org {
		return store.Approval{}, notFound
	}
	if err != nil {
		return a, unavailable(err)
	}
	ask := approverInput(call.Exec, a)
	ask.Approval = &policy.Approval{Requester: a.RequesterRef, ApprovalID: a.ID}
	d, err := s.Policy.Decide(ctx, ask)
	if err != nil {
		return a, fault.New(fault.Unavailable, gateway.CodePolicyUnavailable,
			"policy unavailable; the approval was not decided (fail closed)")
	}
	if !d.Allow {
		code := denialCode(d.Reasons)
		if code == CodeNotApprover {
			return store.Approval{}, notFound
		}
		return a, fault.New(fault.Denied, code,
			"%s may not decide approval %s of %s: %s", call.Exec.Subject.Ref, a.ID, a.Ref, reasonCodes(d.Reasons))
	}
	return a, nil
}

// approverCodes are the policy's reasons that say this approver may never decide the call,
// whatever they hold; the first one present is the answer's code, in this order.
var approverCodes = []string{CodeOwnApproval, CodeApproverNotHuman}

// denialCode is the code of a refused decision: an approverCodes reason, else NOT_AN_APPROVER.
func denialCode(rs []policy.Reason) string {
	for _, code := range approverCodes {
		if slices.ContainsFunc(rs, func(r policy.Reason) bool { return r.Code == code }) {
			return code
		}
	}
	return CodeNotApprover
}

// approverInput asks the policy whether the approver, in their own environment, holds the
// held capability of the biome it runs for: its humanBaseline (org role and environments,
// org administrators) or, for explicit-only, a grant that names them.
func approverInput(ec identity.ExecContext, a store.Approval) policy.Input {
	return policy.Input{Ref: a.Ref, Biome: a.Biome, Subject: policy.Subject{Kind: ec.Subject.Kind, Ref: ec.Subject.Ref},
		Groups: ec.Groups, Roles: ec.Roles, OrgRole: ec.OrgRole, Org: ec.Org, Project: ec.Project, Session: ec.Session,
		Environment: ec.Environment, Armed: ec.Armed}
}

// move is one compare-and-set of a's state, mapping a lost race or an expiry to its error.
func (s *Service) move(ctx context.Context, a store.Approval, t store.ApprovalTransition) (store.Approval, error) {
	t.ID, t.At = a.ID, s.now()
	moved, err := s.Store.TransitionApproval(ctx, t)
	switch {
	case err == nil:
		return moved, nil
	case !errors.Is(err, store.ErrConflict):
		return a, unavailable(err)
	case moved.Status == store.ApprovalPending && t.Live:
		return a, s.expire(ctx, moved)
	}
	return moved, fault.New(fault.Conflict, CodeAlreadyDecided, "approval %s is already %s", a.ID, moved.Status)
}

// expire closes a pending approval past its expiry; it never runs.
func (s *Service) expire(ctx context.Context, a store.Approval) error {
	expired, err := s.Store.TransitionApproval(ctx, store.ApprovalTransition{ID: a.ID, From: store.ApprovalPending,
		To: store.ApprovalExpired, At: s.now()})
	if err == nil {
		if err := s.audit(ctx, expired, identity.ExecContext{Subject: identity.Subject{Kind: "service", Ref: "service:xema"}},
			DecisionExpired, ""); err != nil {
			return err
		}
	} else if !errors.Is(err, store.ErrConflict) {
		return unavailable(err)
	}
	return fault.New(fault.Gone, CodeExpired, "approval %s expired at %s and will never run", a.ID,
		a.ExpiresAt.Format(time.RFC3339))
}

// audit records one step of an approval, linked to the held call's audit record. via is the
// audit id of the capability call that took the step, when there is one.
func (s *Service) audit(ctx context.Context, a store.Approval, by identity.ExecContext, decision, via string) error {
	detail, _ := json.Marshal(map[string]string{"approvalId": a.ID, "reason": a.Reason, "via": via})
	err := s.Audit.Append(ctx, store.AuditRecord{ID: audit.NewID("apr_"), Org: a.Org, Time: s.now(), Ref: a.Ref,
		SubjectKind: by.Subject.Kind, SubjectRef: by.Subject.Ref, Environment: a.Environment, Decision: decision,
		Reasons: json.RawMessage("[]"), BundleRevision: s.Policy.Revision(), Runner: "approval", Outcome: a.Status,
		ParentID: a.AuditID, Detail: detail})
	if err != nil {
		return unavailable(err)
	}
	return nil
}

// Invocation is GET /v1/invocations/{id}: a held call's status, with its output once it has
// run. Its requester may read it, and so may whoever the policy admits to approval:list@1
// (org administrators); anyone else learns nothing, as for an unknown id.
func (s *Service) Invocation(ctx context.Context, ec identity.ExecContext, id string) (View, error) {
	notFound := &fault.Error{Kind: fault.NotFound, Code: CodeNotFound, Message: fmt.Sprintf("no invocation %q", id)}
	a, err := s.Store.GetApproval(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && a.Org != ec.Org {
		return View{}, notFound
	}
	if err != nil {
		return View{}, &fault.Error{Kind: fault.Unavailable, Code: gateway.CodeStoreUnavailable,
			Message: "store unavailable; nothing was read (fail closed)"}
	}
	if a.RequesterRef != ec.Subject.Ref {
		in := approverInput(ec, a)
		in.Ref, in.Biome = RefList, ""
		d, err := s.Policy.Decide(ctx, in)
		if err != nil || !d.Allow {
			return View{}, notFound
		}
	}
	return view(a, true), nil
}

func unavailable(err error) *fault.Error {
	return &fault.Error{Kind: fault.Unavailable, Code: gateway.CodeStoreUnavailable,
		Message: "approval store unavailable; nothing was changed (fail closed)", Err: err}
}

func codeOf(err error) string {
	var ge *fault.Error
	if errors.As(err, &ge) {
		return ge.Code
	}
	return "INTERNAL"
}

func reasonCodes(rs []policy.Reason) string {
	out := ""
	for i, r := range rs {
		if i > 0 {
			out += ", "
		}
		out += r.Code
	}
	return out
}
