package approval

// This file: ending held calls no one decided in time.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/store"
)

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
