package approval

// This file: running an approved call and recording how it ended.

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/xemahq/xema/internal/answer"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/spool"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/txntoken"
)

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
		res, err := s.Runner.RunApproved(ctx, exec, gateway.Request{Ref: a.Ref, Input: a.Input,
			Approval: &txntoken.Approval{ID: a.ID, By: a.DecidedBy, At: a.UpdatedAt.Unix()}}, a.BiomeVersion, a.AuditID, dispatching)
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
