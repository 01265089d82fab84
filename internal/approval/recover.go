package approval

// This file: recovering approved calls whose holder stopped.

import (
	"context"
	"errors"
	"fmt"

	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/store"
)

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
