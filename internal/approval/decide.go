package approval

// This file: approving and rejecting a held call, and who may.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/store"
)

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
	if e := s.entry(a); e != nil {
		return e.Resource(a.Input)
	}
	return ""
}

// sideEffects is what the held call's capability says calling it does, for its approver; ""
// when the capability is gone.
func (s *Service) sideEffects(a store.Approval) string {
	if e := s.entry(a); e != nil {
		return e.Manifest.SideEffects
	}
	return ""
}

// entry is the held call's capability as the org's catalog serves it now; nil when gone.
func (s *Service) entry(a store.Approval) *catalog.Entry {
	if s.Catalog == nil {
		return nil
	}
	e, _ := s.Catalog.Snapshot().For(a.Org, a.Ref)
	return e
}
