package approval

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/answer"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/store"
)

// Task is a held call as its requester follows it: an MCP task (the held call is the task;
// its id is the approval id) and what an idempotent retry of the call answers.
type Task struct {
	ID        string
	Status    string // the approval's state
	CreatedAt time.Time
	UpdatedAt time.Time
	ExpiresAt time.Time
	// End is the call's final answer once it reached an end: what the run answered when it
	// ran, else the typed error of why it never will. Nil while it waits or runs.
	End *answer.Answer
	// Withdrawn says who withdrew a withdrawn call, and why when it was not its requester.
	Withdrawn string
}

// Waiting says the call waits for a decision; otherwise it runs or has ended.
func (t Task) Waiting() bool { return t.Status == store.ApprovalPending }

// storedAnswer is Approval.Answer: the answer the run gave.
type storedAnswer struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
}

// Task is where the held call id stands, for its requester only: a caller of another org,
// or of the same org but not its requester, is answered exactly as for an unknown id. A
// pending call past its expiry is expired here (and audited), as approving it would.
func (s *Service) Task(ctx context.Context, ec identity.ExecContext, id string) (Task, error) {
	a, err := s.own(ctx, ec, id)
	if err != nil {
		return Task{}, err
	}
	if a.Status == store.ApprovalPending && !a.ExpiresAt.After(s.now()) {
		var fe *fault.Error
		if err := s.expire(ctx, a); errors.As(err, &fe) && fe.Code != CodeExpired {
			return Task{}, err
		}
		if a, err = s.Store.GetApproval(ctx, id); err != nil {
			return Task{}, unavailable(err)
		}
	}
	t := Task{ID: a.ID, Status: a.Status, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt, ExpiresAt: a.ExpiresAt}
	if a.Status == store.ApprovalWithdrawn {
		t.Withdrawn = withdrawnBy(a)
	}
	if end, ok := endOf(a); ok {
		if ran(a) { // the run's answer carries its output: read only where a call may receive it
			var fe *fault.Error
			if err := s.audience(ctx, ec, a); errors.As(err, &fe) && fe.Kind == fault.Denied {
				end = answer.Error(fe)
			} else if err != nil {
				return Task{}, err
			}
		}
		t.End = &end
	}
	return t, nil
}

// Withdraw is the requester cancelling their held call: pending → withdrawn, audited; it
// never runs, and approvers see it withdrawn. A call already approved is not stopped and
// one already ended stays as it ended: the withdrawal is acknowledged all the same (an MCP
// task's cancellation is cooperative).
func (s *Service) Withdraw(ctx context.Context, ec identity.ExecContext, id string) error {
	a, err := s.own(ctx, ec, id)
	if err != nil || a.Status != store.ApprovalPending {
		return err
	}
	w, err := s.move(ctx, a, store.ApprovalTransition{From: store.ApprovalPending, To: store.ApprovalWithdrawn, Live: true,
		DecidedBy: ec.Subject.Ref})
	var fe *fault.Error
	if errors.As(err, &fe) && (fe.Code == CodeExpired || fe.Code == CodeAlreadyDecided) {
		return nil // decided or expired meanwhile: it ends as that
	}
	if err != nil {
		return err
	}
	return s.audit(ctx, w, ec, DecisionWithdrawn, "")
}

// WithdrawRevoked ends the pending held calls the revoked grant g left behind: every pending
// call of its org and biome (a revoked grant leaves the pair no grant in effect, so none of
// them could run now, and a later grant must not run them on a decision taken under this
// one). Each moves pending → withdrawn by the revoker, audited and told to approvers; its
// requester's task ends cancelled. It returns how many it withdrew; an error leaves the rest
// pending (they still cannot be approved: GRANT_NOT_IN_EFFECT).
func (s *Service) WithdrawRevoked(ctx context.Context, g store.Grant) (int, error) {
	kind, _, _ := strings.Cut(g.RevokedBy, ":")
	by := identity.ExecContext{Subject: identity.Subject{Kind: kind, Ref: g.RevokedBy}, Org: g.Org}
	reason := fmt.Sprintf("grant %s of %s was revoked by %s", g.ID, g.BiomeID, g.RevokedBy)
	withdrawn := 0
	for {
		pending, err := s.Store.ListApprovals(ctx, store.ApprovalFilter{Org: g.Org, Biome: g.BiomeID, Status: store.ApprovalPending,
			Limit: 100})
		if err != nil {
			return withdrawn, unavailable(err)
		}
		for _, a := range pending {
			w, err := s.move(ctx, a, store.ApprovalTransition{From: store.ApprovalPending, To: store.ApprovalWithdrawn, Live: true,
				DecidedBy: g.RevokedBy, Reason: reason})
			var fe *fault.Error
			if errors.As(err, &fe) && (fe.Code == CodeExpired || fe.Code == CodeAlreadyDecided) {
				continue // decided or expired meanwhile: it ends as that
			}
			if err != nil {
				return withdrawn, err
			}
			if err := s.audit(ctx, w, by, DecisionWithdrawn, ""); err != nil {
				return withdrawn, err
			}
			withdrawn++
		}
		if len(pending) < 100 {
			return withdrawn, nil
		}
	}
}

// own loads the held call id of the caller, in the context it was held in: another org's,
// another subject's, one held in another environment or armed set, and an unknown one are
// the same not-found.
func (s *Service) own(ctx context.Context, ec identity.ExecContext, id string) (store.Approval, error) {
	notFound := fault.New(fault.NotFound, CodeNotFound, "no task %q", id)
	if !strings.HasPrefix(id, "apr_") || len(id) > 64 {
		return store.Approval{}, notFound
	}
	a, err := s.Store.GetApproval(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && (a.Org != ec.Org || a.RequesterRef != ec.Subject.Ref || !heldIn(a, ec)) {
		return store.Approval{}, notFound
	}
	if err != nil {
		return store.Approval{}, unavailable(err)
	}
	return a, nil
}

// endOf is the final answer of a held call that reached an end: the answer its run gave,
// or the typed error of a call that never ran (or whose end was recorded without one).
func endOf(a store.Approval) (answer.Answer, bool) {
	switch a.Status {
	case store.ApprovalPending, store.ApprovalApproved, store.ApprovalRunning, store.ApprovalDispatched:
		return answer.Answer{}, false
	}
	var st storedAnswer
	if len(a.Answer) > 0 && json.Unmarshal(a.Answer, &st) == nil && st.Status != 0 {
		return answer.Answer{Status: st.Status, Body: st.Body}, true
	}
	var e *fault.Error
	switch a.Status {
	case store.ApprovalRejected:
		e = fault.New(fault.Denied, CodeRejected, "approval %s was rejected by %s: %s; the call never ran", a.ID, a.DecidedBy, a.Reason)
	case store.ApprovalExpired:
		e = fault.New(fault.Gone, CodeExpired, "approval %s expired at %s and will never run", a.ID, a.ExpiresAt.Format(time.RFC3339))
	case store.ApprovalWithdrawn:
		e = fault.New(fault.Gone, CodeWithdrawn, "approval %s was withdrawn %s; the call never ran", a.ID, withdrawnBy(a))
	case store.ApprovalInterrupted:
		e = fault.New(fault.Unavailable, OutcomeUnknown, "the call of approval %s was dispatched, then the gateway stopped "+
			"before its outcome was recorded; it is never run again", a.ID)
		e.Outcome = a.Outcome
	case store.ApprovalDone: // ended before answers were kept
		raw, _ := json.Marshal(map[string]any{"output": a.Output, "auditId": a.AuditID}) // a document and a string encode
		return answer.Answer{Status: http.StatusOK, Body: raw}, true
	default: // failed, without its answer
		e = fault.New(fault.Provider, cmp.Or(a.Outcome, fault.CodeInternal), "the call of approval %s failed: %s", a.ID, a.Outcome)
	}
	e.AuditID = a.AuditID
	return answer.Error(e), true
}

// withdrawnBy says who withdrew a: its requester, or the revoke of its grant (the reason).
func withdrawnBy(a store.Approval) string {
	if a.DecidedBy == a.RequesterRef || a.Reason == "" {
		return "by its requester"
	}
	return "because " + a.Reason
}

// heldIn says ec is the context a was held in: the same environment, armed set and project
// as recorded with it. The same subject with another token (a public session's, for a call
// held in a project) neither follows nor cancels the call, nor reads its output. Groups and
// roles are authority, not context, and the session claim (OIDC sid) changes at every
// sign-in: a call outlives both.
func heldIn(a store.Approval, ec identity.ExecContext) bool {
	var held identity.ExecContext
	if json.Unmarshal(a.Exec, &held) != nil {
		return false // a context the gateway cannot read binds to no one: fail closed
	}
	return a.Environment == ec.Environment && held.Environment == ec.Environment && held.Project == ec.Project &&
		slices.Equal(armedSet(held.Armed), armedSet(ec.Armed))
}

// armedSet is globs as a set: sorted, without repeats.
func armedSet(globs []string) []string {
	set := slices.Clone(globs)
	slices.Sort(set)
	return slices.Compact(set)
}

// ran says the held call ran: its answer or output is kept.
func ran(a store.Approval) bool { return len(a.Answer) > 0 || len(a.Output) > 0 }

// CodeAudienceIncompatible is the policy's reason (policies/checks.rego, grant.rego) for an
// output whose classification the caller's environment, or the grant, does not admit.
const CodeAudienceIncompatible = "AUDIENCE_INCOMPATIBLE"

// audience refuses ec the output of the held call a when a call of theirs would be refused
// it: the policy, asked of ec making the held call, names AUDIENCE_INCOMPATIBLE. Only that
// reason counts: a reader need not hold the capability (an org administrator reads the
// queue), but never receives an output their own call could not.
func (s *Service) audience(ctx context.Context, ec identity.ExecContext, a store.Approval) error {
	d, err := s.Policy.Decide(ctx, s.heldInput(ec, a))
	if err != nil {
		return fault.New(fault.Unavailable, gateway.CodePolicyUnavailable, "policy unavailable; nothing was read (fail closed)")
	}
	i := slices.IndexFunc(d.Reasons, func(r policy.Reason) bool { return r.Code == CodeAudienceIncompatible })
	if i < 0 {
		return nil
	}
	return fault.New(fault.Denied, CodeAudienceIncompatible, "the output of approval %s may not be read from environment %s: %s",
		a.ID, ec.Environment, d.Reasons[i].Detail)
}
