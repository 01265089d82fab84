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
	"io/fs"
	"strings"
	"time"

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
	ApprovalID   string `json:"approvalId"`
	AuditID      string `json:"auditId"`
	Ref          string `json:"ref"`
	Biome        string `json:"biome,omitempty"`
	BiomeVersion string `json:"biomeVersion,omitempty"`
	RiskTier     string `json:"riskTier,omitempty"`
	// SideEffects is what the capability says calling it does (listed views only).
	SideEffects    string          `json:"sideEffects,omitempty"`
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
