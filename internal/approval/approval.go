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
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/answer"
	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/notify"
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
	// CodeGrantNotInEffect: the held call's grant was revoked; no one can approve it now.
	CodeGrantNotInEffect = "GRANT_NOT_IN_EFFECT"
	// Ends of a held call that never ran, as its requester's task and idempotent retry answer
	// them (CodeExpired too).
	CodeRejected  = "APPROVAL_REJECTED"
	CodeWithdrawn = "APPROVAL_WITHDRAWN"
	// CodeOrgMismatch: the held call is another org's (the policy's second line behind the
	// store lookup's org check); answered as an unknown approval.
	CodeOrgMismatch = "APPROVAL_ORG_MISMATCH"
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

// Notifier queues the notifications of an approval's step, to be written with the step
// itself (notify.Deliverer), and wakes their delivery once it is written.
type Notifier interface {
	Events(a store.Approval, kind string, at time.Time) []store.ApprovalEvent
	Kick()
}

// DefaultMaxPending is how many calls one requester of an org may have waiting for approval
// at once when the operator names no bound (--max-pending-approvals).
const DefaultMaxPending = 100

// CodeTooManyPending (429): the requester already has as many calls waiting for approval as
// one subject may; the call was not held.
const CodeTooManyPending = "TOO_MANY_PENDING"

// Queue stores the calls the gateway holds (gateway.ApprovalQueue). It needs only the store,
// so the gateway is built on it, and the Service that runs approved calls on the gateway:
// each part is built once, in order.
type Queue struct {
	Store interface {
		PutApproval(ctx context.Context, a store.Approval, events ...store.ApprovalEvent) error
		CountPendingApprovals(ctx context.Context, org, requester string, limit int) (int, error)
	}
	// TTL is how long a held call may wait; 0 means DefaultTTL.
	TTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Notify, when set, tells approvers the call is held.
	Notify Notifier
	// MaxPending bounds the calls one requester of an org may have pending at once, so one
	// agent cannot fill the approvers' queue; 0 means DefaultMaxPending.
	MaxPending int

	// requesters serialize, per requester (striped), counting the pending calls and holding
	// the one admitted: concurrent calls of one subject cannot pass the bound together.
	requesters [64]sync.Mutex
}

var _ gateway.ApprovalQueue = (*Queue)(nil)

// Admit is the bound on ec's pending calls, asked before anything of a call to hold is
// stored: TOO_MANY_PENDING when ec has MaxPending calls pending already. An admitted caller
// holds the requester's turn until it calls release, once the call is held (or not).
func (q *Queue) Admit(ctx context.Context, ec identity.ExecContext) (release func(), err error) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(ec.Org + "\x00" + ec.Subject.Ref)) // a hash's Write never fails
	mu := &q.requesters[h.Sum32()%uint32(len(q.requesters))]
	mu.Lock()
	limit := cmp.Or(q.MaxPending, DefaultMaxPending)
	n, err := q.Store.CountPendingApprovals(ctx, ec.Org, ec.Subject.Ref, limit)
	switch {
	case err != nil:
		mu.Unlock()
		return nil, fmt.Errorf("admit a held call of %s: %w", ec.Subject.Ref, err)
	case n >= limit:
		mu.Unlock()
		return nil, fault.New(fault.RateLimited, CodeTooManyPending,
			"%s already has %d calls waiting for approval, as many as one subject may; this call was not held: wait for a decision, or withdraw one (MCP tasks/cancel)",
			ec.Subject.Ref, n)
	}
	return mu.Unlock, nil
}

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
	a := store.Approval{ID: p.ID, Org: p.Exec.Org, AuditID: p.AuditID, Ref: p.Ref, Biome: p.Biome,
		BiomeVersion: p.BiomeVersion, PolicyRevision: p.PolicyRevision, RiskTier: p.RiskTier,
		RequesterRef: p.Exec.Subject.Ref, Environment: p.Exec.Environment, Exec: exec, Input: p.Input,
		Status: store.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(ttl)}
	if q.Notify == nil {
		return q.Store.PutApproval(ctx, a)
	}
	if err := q.Store.PutApproval(ctx, a, q.Notify.Events(a, notify.KindHeld, now)...); err != nil {
		return err
	}
	q.Notify.Kick()
	return nil
}

// Runner runs an approved call through the funnel again, as its requester (gateway.Gateway).
type Runner interface {
	RunApproved(ctx context.Context, ec identity.ExecContext, req gateway.Request, heldVersion, parentAuditID string,
		dispatching func(ctx context.Context) error) (*gateway.Result, error)
}

// Store is the approvals' table as the Service reads and moves them (store.Store).
type Store interface {
	GetApproval(ctx context.Context, id string) (store.Approval, error)
	ListApprovals(ctx context.Context, f store.ApprovalFilter) ([]store.Approval, error)
	TransitionApproval(ctx context.Context, t store.ApprovalTransition) (store.Approval, error)
	StaleApprovals(ctx context.Context, holder string, now time.Time, limit int) ([]store.Approval, error)
}

// Service decides and runs calls waiting for approval.
type Service struct {
	Store  Store
	Policy *policy.Engine
	Runner Runner
	Audit  *audit.Log
	// Catalog finds a held call's capability, whose resource property names the resource the
	// policy judges an approver and a reader on, as it judged the requester.
	Catalog gateway.Snapshots
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Replica names this gateway process's claims (stable across its restarts); "" means
	// "local".
	Replica string
	// Spool keeps an approval's end when the store cannot take it.
	Spool *spool.Spool
	// Notify, when set, tells approvers of each step (decided, expired, withdrawn, held
	// again after a recovery).
	Notify Notifier
}

func (s *Service) replica() string {
	if s.Replica != "" {
		return s.Replica
	}
	return "local"
}

// View is the public shape of a held call: what was asked (ref, the biome version it was
// pinned to, input), by whom, under which policy revision, until when, and how it ended.
type View struct {
	ApprovalID     string          `json:"approvalId"`
	AuditID        string          `json:"auditId"`
	Ref            string          `json:"ref"`
	Biome          string          `json:"biome,omitempty"`
	BiomeVersion   string          `json:"biomeVersion,omitempty"`
	RiskTier       string          `json:"riskTier,omitempty"`
	PolicyRevision string          `json:"policyRevision,omitempty"`
	Requester      string          `json:"requester"`
	Environment    string          `json:"environment"`
	Status         string          `json:"status"`
	Input          json.RawMessage `json:"input,omitempty"`
	DecidedBy      string          `json:"decidedBy,omitempty"`
	Reason         string          `json:"reason,omitempty"`
	Outcome        string          `json:"outcome,omitempty"`
	Output         json.RawMessage `json:"output,omitempty"`
	CreatedAt      string          `json:"createdAt"`
	ExpiresAt      string          `json:"expiresAt"`
	// CanDecide says whether the viewer may approve or reject the call now; WhyNot, when they
	// may not, says why (listed views only).
	CanDecide *bool   `json:"canDecide,omitempty"`
	WhyNot    *WhyNot `json:"whyNot,omitempty"`
}

// WhyNot is why a viewer may not decide a held call: the code a decision would be refused
// with, a sentence, and the policy's reasons (what environment, role or grant is missing).
type WhyNot struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Reasons []policy.Reason `json:"reasons,omitempty"`
}

func view(a store.Approval, withOutput bool) View {
	v := View{ApprovalID: a.ID, AuditID: a.AuditID, Ref: a.Ref, Biome: a.Biome, BiomeVersion: a.BiomeVersion,
		RiskTier: a.RiskTier, PolicyRevision: a.PolicyRevision, Requester: a.RequesterRef,
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
	ApprovalID string `json:"approvalId"`
	Status     string `json:"status"`
	Biome      string `json:"biome"`
	Ref        string `json:"ref"`
	Requester  string `json:"requester"`
	Cursor     string `json:"cursor"`
	Limit      int    `json:"limit"`
}

// DefaultPage is how many held calls a page lists when the caller names no limit (the
// input schema allows 1 to 100).
const DefaultPage = 50

// Page is the output of approval:list@1: a page of held calls, newest first, and the cursor
// of the next page while there is one.
type Page struct {
	Approvals  []View `json:"approvals"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// list serves approval:list@1 to the org's members. Each view says whether the viewer may
// decide the call and, if not, why. An org administrator sees the whole queue; another
// member only the calls they may decide, so a page is filled from as many reads as it takes
// (at most memberScans), and the cursor stays a place in the queue's order.
func (s *Service) list(ctx context.Context, call kernel.Call) (any, error) {
	var in listInput
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return nil, fmt.Errorf("decode validated input: %w", err)
	}
	after, err := decodeCursor(in.Cursor)
	if err != nil {
		return nil, err
	}
	limit := cmp.Or(in.Limit, DefaultPage)
	wholeQueue := call.Exec.OrgAdmin()
	page := Page{Approvals: make([]View, 0, limit)}
	status := in.Status
	if !wholeQueue { // a member sees only calls still to decide: read no others
		if status != "" && status != store.ApprovalPending {
			return page, nil
		}
		status = store.ApprovalPending
	}
	judged := map[string]policy.Decision{}
	for scan := 1; ; scan++ {
		var as []store.Approval
		if in.ApprovalID != "" {
			a, err := s.Store.GetApproval(ctx, in.ApprovalID)
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				return nil, unavailable(err)
			case a.Org == call.Exec.Org:
				as = []store.Approval{a}
			}
		} else if as, err = s.Store.ListApprovals(ctx, store.ApprovalFilter{Org: call.Exec.Org, Status: status, Biome: in.Biome,
			Ref: in.Ref, RequesterRef: in.Requester, Limit: limit + 1, After: after}); err != nil {
			return nil, unavailable(err)
		}
		more := len(as) > limit
		if more {
			as = as[:limit]
		}
		for i, a := range as {
			why, err := s.whyNot(ctx, call.Exec, a, judged)
			if err != nil {
				return nil, err
			}
			if why != nil && !wholeQueue {
				continue
			}
			v := view(a, false)
			can := why == nil
			v.CanDecide, v.WhyNot = &can, why
			page.Approvals = append(page.Approvals, v)
			if len(page.Approvals) == limit {
				if more || i < len(as)-1 {
					page.NextCursor = encodeCursor(a)
				}
				return page, nil
			}
		}
		if !more || in.ApprovalID != "" {
			return page, nil
		}
		last := as[len(as)-1]
		if scan == memberScans {
			page.NextCursor = encodeCursor(last) // a short page: the rest of the queue lies past here
			return page, nil
		}
		after = &store.ApprovalKey{CreatedAt: last.CreatedAt, ID: last.ID}
	}
}

// memberScans bounds the reads of the queue one page of a member's listing takes.
const memberScans = 5

// CodeInvalidCursor answers a cursor the gateway did not write.
const CodeInvalidCursor = "INVALID_CURSOR"

// encodeCursor is the opaque place of a in the list's order. It only says where a page
// starts: the org and filters are always the caller's own.
func encodeCursor(a store.Approval) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(a.CreatedAt.UnixMicro(), 10) + "." + a.ID))
}

func decodeCursor(c string) (*store.ApprovalKey, error) {
	if c == "" {
		return nil, nil
	}
	bad := fault.New(fault.Invalid, CodeInvalidCursor, "cursor is not one the gateway wrote; pass nextCursor of the previous page as it was")
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, bad
	}
	at, id, ok := strings.Cut(string(raw), ".")
	micros, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || micros < 0 || !strings.HasPrefix(id, "apr_") {
		return nil, bad
	}
	return &store.ApprovalKey{CreatedAt: time.UnixMicro(micros).UTC(), ID: id}, nil
}

// whyNot says why the viewer ec may not decide a now, nil when they may: a call no longer
// pending or past its expiry, or the policy's refusal (policies/approval.rego: of the
// approver, on the held capability). judged caches the policy's decisions of one listing
// by ref, biome and whether the call is the viewer's own.
func (s *Service) whyNot(ctx context.Context, ec identity.ExecContext, a store.Approval, judged map[string]policy.Decision) (*WhyNot, error) {
	switch {
	case a.Status != store.ApprovalPending:
		return &WhyNot{Code: CodeAlreadyDecided, Message: fmt.Sprintf("approval %s is already %s", a.ID, a.Status)}, nil
	case !a.ExpiresAt.After(s.now()):
		return &WhyNot{Code: CodeExpired, Message: fmt.Sprintf("approval %s expired at %s and will never run", a.ID,
			a.ExpiresAt.Format(time.RFC3339))}, nil
	}
	return s.approver(ctx, ec, a, judged)
}

// approver asks the policy whether ec may decide a, whatever its state: nil when they may,
// else why not.
func (s *Service) approver(ctx context.Context, ec identity.ExecContext, a store.Approval, judged map[string]policy.Decision) (*WhyNot, error) {
	ask := s.heldInput(ec, a)
	key := a.Ref + "\x00" + a.Biome + "\x00" + a.Org + "\x00" + ask.Resource + "\x00" + strconv.FormatBool(a.RequesterRef == ec.Subject.Ref)
	d, ok := judged[key]
	if !ok {
		ask.Approval = &policy.Approval{Requester: a.RequesterRef, ApprovalID: a.ID, Org: a.Org}
		got, err := s.Policy.Decide(ctx, ask)
		if err != nil {
			return nil, fault.New(fault.Unavailable, gateway.CodePolicyUnavailable,
				"policy unavailable; nothing was decided (fail closed)")
		}
		d = got
		if judged != nil {
			judged[key] = d
		}
	}
	if d.Allow {
		return nil, nil
	}
	code := denialCode(d.Reasons)
	msg := fmt.Sprintf("%s may not decide approval %s of %s: %s", ec.Subject.Ref, a.ID, a.Ref, reasonDetails(d.Reasons))
	if code == CodeNotApprover {
		msg = fmt.Sprintf("%s in environment %s is not an approver of %s (approval %s): an approver must hold %s themselves, in their own environment; missing: %s",
			ec.Subject.Ref, ec.Environment, a.Ref, a.ID, a.Ref, reasonDetails(d.Reasons))
	}
	return &WhyNot{Code: code, Message: msg, Reasons: d.Reasons}, nil
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
	ran, refused := s.run(ctx, a)
	if refused != nil {
		return nil, refused
	}
	return view(ran, false), nil
}

// redecided is the approver's answer when the policy, asked again as the approved call was
// about to run, denied it: the new denial, typed, and that the call did not run.
func redecided(a store.Approval, d *gateway.Denial) *fault.Error {
	kind := fault.Denied
	if d.Limited {
		kind = fault.RateLimited
	}
	return &fault.Error{Kind: kind, Code: d.Code, RetryAfter: d.RetryAfter,
		Message: fmt.Sprintf("approval %s was approved, but the current policy denies the call now (%s), so it did not run; it was held under policy revision %s",
			a.ID, d.Message, cmp.Or(a.PolicyRevision, "(unknown)"))}
}

// run runs an approved call and records how it ended. The run's own audit records link to
// the held call's auditId (gateway.RunApproved). Right before the runner (after the run's
// decision record) the approval moves running → dispatched: recovery sends a running one
// back to pending (it never reached its provider) and ends a dispatched one interrupted.
// refused is the approver's answer when the call did not run after all: the policy's denial
// now, or the biome version it was held under no longer serving (VERSION_CHANGED).
func (s *Service) run(ctx context.Context, a store.Approval) (ran store.Approval, refused *fault.Error) {
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
		res, err := s.Runner.RunApproved(ctx, exec, gateway.Request{Ref: a.Ref, Input: a.Input}, a.BiomeVersion, a.AuditID, dispatching)
		ended(&end, res, err)
		var fe *fault.Error
		switch {
		case res != nil && res.Denial != nil:
			refused = redecided(a, res.Denial)
		case errors.As(err, &fe) && fe.Code == gateway.CodeVersionChanged:
			refused = fe
		}
		ans, _ := answer.Of(res, err)
		end.Answer, _ = json.Marshal(storedAnswer{Status: ans.Status, Body: ans.Body}) // a status and a JSON body encode
	}
	// The run happened: its end is recorded even if the approver's request was cancelled,
	// and spooled if the store cannot take it now (a running one still never dispatched is
	// left to recovery: its lease ends).
	done, err := s.move(context.WithoutCancel(ctx), a, end)
	if err != nil {
		var re *fault.Error
		if end.From == store.ApprovalDispatched && errors.As(err, &re) && re.Code == fault.CodeStoreUnavailable {
			t := end
			t.ID, t.At = a.ID, s.now()
			s.Spool.Add(spool.Entry{Approval: &t})
		}
		a.Status, a.Outcome = end.To, end.Outcome
		return a, refused
	}
	return done, refused
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
			s.notifying(&t, a) // back to pending: approvers are told it waits again
			to, err := s.Store.TransitionApproval(ctx, t)
			if errors.Is(err, store.ErrConflict) {
				continue // its holder, or another replica's recovery, moved it meanwhile
			}
			if err != nil {
				return moved, fmt.Errorf("recover approval %s: %w", a.ID, err)
			}
			s.kick(t)
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
// requester (input.approval, policies/approval.rego). Another org's approval is answered as
// an unknown id; one of the caller's org they may not decide is a 403 naming what they lack
// (NOT_AN_APPROVER, OWN_APPROVAL, APPROVER_NOT_HUMAN).
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
	why, err := s.approver(ctx, call.Exec, a, nil)
	if err != nil {
		return a, err
	}
	// Another org's held call is unknown, whatever else the policy says of the approver.
	if why != nil && slices.ContainsFunc(why.Reasons, func(r policy.Reason) bool { return r.Code == CodeOrgMismatch }) {
		return store.Approval{}, notFound
	}
	if why != nil && onlyMissingGrant(why.Reasons) {
		// The caller would decide it but for the grant: it was revoked since the call was
		// held, and the call can no longer run (it stays pending until it expires).
		return a, fault.New(fault.Denied, CodeGrantNotInEffect,
			"the call %s was held under a grant of biome %s that is no longer in effect (revoked): it cannot be approved", a.ID, a.Biome)
	}
	if why != nil {
		return a, fault.New(fault.Denied, why.Code, "%s", why.Message)
	}
	return a, nil
}

// onlyMissingGrant reports whether the policy's sole reason is the biome's missing grant.
func onlyMissingGrant(rs []policy.Reason) bool {
	return len(rs) > 0 && !slices.ContainsFunc(rs, func(r policy.Reason) bool { return r.Code != "MISSING_GRANT" })
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

// heldInput is the held call as the policy would judge it made by ec, in their own
// environment: the held capability, the biome it runs for and the resource it names. Asked
// for an approver, it says whether they hold the capability themselves (humanBaseline, or for
// explicit-only a grant that names them), on the same resource a grant's resources bind.
func (s *Service) heldInput(ec identity.ExecContext, a store.Approval) policy.Input {
	in := gateway.PolicyInput(ec, a.Ref, s.resource(a))
	in.Biome = a.Biome
	return in
}

// resource is the resource the held call names, read from its input by its capability's
// resource property; "" when the capability is gone or declares none (the policy then
// refuses a call a grant's resources bind: fail closed).
func (s *Service) resource(a store.Approval) string {
	if s.Catalog == nil {
		return ""
	}
	e, ok := s.Catalog.Snapshot().For(a.Org, a.Ref)
	if !ok {
		return ""
	}
	return e.Resource(a.Input)
}

// move is one compare-and-set of a's state, mapping a lost race or an expiry to its error.
func (s *Service) move(ctx context.Context, a store.Approval, t store.ApprovalTransition) (store.Approval, error) {
	t.ID, t.At = a.ID, s.now()
	s.notifying(&t, a)
	moved, err := s.Store.TransitionApproval(ctx, t)
	switch {
	case err == nil:
		s.kick(t)
		return moved, nil
	case !errors.Is(err, store.ErrConflict):
		return a, unavailable(err)
	case moved.Status == store.ApprovalPending && t.Live:
		return a, s.expire(ctx, moved)
	}
	return moved, fault.New(fault.Conflict, CodeAlreadyDecided, "approval %s is already %s", a.ID, moved.Status)
}

// notifying adds to t the notifications of a's move, when the move is one approvers are
// told of (notify.Kind); they are written with the move, only if it wins.
func (s *Service) notifying(t *store.ApprovalTransition, a store.Approval) {
	kind := notify.Kind(t.To)
	if s.Notify == nil || kind == "" {
		return
	}
	after := a
	after.Status = t.To
	after.DecidedBy = cmp.Or(t.DecidedBy, a.DecidedBy)
	if t.Reset {
		after.DecidedBy = t.DecidedBy
	}
	after.Reason = cmp.Or(t.Reason, a.Reason)
	t.Events = s.Notify.Events(after, kind, t.At)
}

// kick wakes the delivery of the notifications a winning move t wrote.
func (s *Service) kick(t store.ApprovalTransition) {
	if len(t.Events) > 0 {
		s.Notify.Kick()
	}
}

// expire closes a pending approval past its expiry; it never runs.
func (s *Service) expire(ctx context.Context, a store.Approval) error {
	if _, err := s.closeExpired(ctx, a); err != nil {
		return err
	}
	return fault.New(fault.Gone, CodeExpired, "approval %s expired at %s and will never run", a.ID,
		a.ExpiresAt.Format(time.RFC3339))
}

// closeExpired moves a pending approval past its expiry to expired, audited and told; false
// when another replica, or a decision, moved it first.
func (s *Service) closeExpired(ctx context.Context, a store.Approval) (bool, error) {
	t := store.ApprovalTransition{ID: a.ID, From: store.ApprovalPending, To: store.ApprovalExpired, At: s.now()}
	s.notifying(&t, a)
	expired, err := s.Store.TransitionApproval(ctx, t)
	switch {
	case errors.Is(err, store.ErrConflict):
		return false, nil
	case err != nil:
		return false, unavailable(err)
	}
	s.kick(t)
	return true, s.audit(ctx, expired, identity.ExecContext{Subject: identity.Subject{Kind: "service", Ref: "service:xema"}},
		DecisionExpired, "")
}

// ExpireDue closes the pending approvals past their expiry (the periodic sweep), so their
// approvers are told and the list shows them expired without anyone trying to approve
// them first. It returns how many it closed.
func (s *Service) ExpireDue(ctx context.Context) (int, error) {
	closed := 0
	for {
		due, err := s.Store.ListApprovals(ctx, store.ApprovalFilter{ExpiredBy: s.now(), Limit: 100})
		if err != nil {
			return closed, fmt.Errorf("expire approvals: %w", err)
		}
		for _, a := range due {
			ok, err := s.closeExpired(ctx, a)
			if err != nil {
				return closed, fmt.Errorf("expire approval %s: %w", a.ID, err)
			}
			if ok {
				closed++
			}
		}
		if len(due) < 100 {
			return closed, nil
		}
	}
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
// run. Its requester may read it in the context it was held in (environment and armed set),
// and so may whoever the policy admits to approval:list@1 and would see it there: an org
// administrator, or another member who may decide it. Anyone else learns nothing, as for an
// unknown id. An output is read only where the caller's own call could receive it
// (AUDIENCE_INCOMPATIBLE otherwise).
func (s *Service) Invocation(ctx context.Context, ec identity.ExecContext, id string) (View, error) {
	notFound := fault.New(fault.NotFound, CodeNotFound, "no invocation %q", id)
	a, err := s.Store.GetApproval(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && a.Org != ec.Org {
		return View{}, notFound
	}
	if err != nil {
		e := fault.New(fault.Unavailable, fault.CodeStoreUnavailable, "store unavailable; nothing was read (fail closed)")
		e.NotRun = true // a read that failed did nothing: a retry under its key may read
		return View{}, e
	}
	requester := a.RequesterRef == ec.Subject.Ref
	if !requester || !heldIn(a, ec) {
		in := gateway.PolicyInput(ec, RefList, "")
		d, err := s.Policy.Decide(ctx, in)
		if err != nil || !d.Allow {
			return View{}, notFound
		}
		// approval:list@1 admits every member; a member who is no administrator reads only
		// the calls the listing shows them (pending, theirs to decide) and the ones they
		// decided: once a call is decided, its input and output are not every approver's.
		if !ec.OrgAdmin() && (requester || a.DecidedBy != ec.Subject.Ref) {
			if why, err := s.whyNot(ctx, ec, a, nil); err != nil || why != nil {
				return View{}, notFound
			}
		}
	}
	if ran(a) {
		if err := s.audience(ctx, ec, a); err != nil {
			return View{}, err
		}
	}
	return view(a, true), nil
}

func unavailable(err error) *fault.Error {
	return fault.Wrap(err, fault.Unavailable, fault.CodeStoreUnavailable, "approval store unavailable; nothing was changed (fail closed)")
}

func codeOf(err error) string {
	var ge *fault.Error
	if errors.As(err, &ge) {
		return ge.Code
	}
	return fault.CodeInternal
}

// reasonDetails is the policy's reasons as one sentence: each one's detail, else its code.
func reasonDetails(rs []policy.Reason) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = cmp.Or(r.Detail, r.Code)
	}
	return strings.Join(parts, "; ")
}
