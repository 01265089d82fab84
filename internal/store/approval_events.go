package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// States of a queued approval event (the approval_events outbox). A pending event is due at
// NextAt; a deliverer claims it under a lease, then finishes it delivered, failed (its
// attempts are spent) or pending again at a later NextAt.
const (
	EventPending   = "pending"
	EventDelivered = "delivered"
	EventFailed    = "failed"
)

// ApprovalEvent is one notification of an approval's step to one target (a webhook or a chat
// conversation), queued with the step itself so a crash between the step and the delivery
// still delivers it.
type ApprovalEvent struct {
	ID         string
	Org        string
	ApprovalID string
	Kind       string // held, decided, expired, withdrawn
	Target     string // what to deliver to: "webhook:<key>" or "chat:<conversation>"
	Body       json.RawMessage
	Status     string
	Attempts   int
	LastError  string
	NextAt     time.Time
	CreatedAt  time.Time
}

// ApprovalEventEnd is how one delivery attempt of a claimed event ended.
type ApprovalEventEnd struct {
	ID     string
	Holder string // the claim the attempt was made under
	At     time.Time
	// Status is EventDelivered, EventFailed, or EventPending to retry at NextAt.
	Status    string
	NextAt    time.Time
	LastError string
}

// ApprovalEventStore is the outbox of approval notifications.
type ApprovalEventStore interface {
	// ClaimApprovalEvents claims for holder, until leaseUntil, at most limit pending events
	// due at now whose lease has ended or that holder holds already (a holder claims only
	// when none of its claims is in flight: one round at a time, or a restart), oldest
	// first, and returns them.
	ClaimApprovalEvents(ctx context.Context, holder string, now, leaseUntil time.Time, limit int) ([]ApprovalEvent, error)
	// EndApprovalEvent records one attempt of an event claimed by e.Holder (ErrConflict when
	// the claim was lost, ErrNotFound for an unknown id): its attempts grow by one.
	EndApprovalEvent(ctx context.Context, e ApprovalEventEnd) error
	// PruneApprovalEvents deletes at most limit delivered or failed events last changed
	// before before.
	PruneApprovalEvents(ctx context.Context, before time.Time, limit int) (int64, error)
}

// Validate checks what the outbox requires of a new event.
func (e ApprovalEvent) Validate() error {
	for _, f := range []struct{ name, v string }{{"ID", e.ID}, {"Org", e.Org}, {"ApprovalID", e.ApprovalID},
		{"Kind", e.Kind}, {"Target", e.Target}} {
		if f.v == "" {
			return fmt.Errorf("%w: approval event %s is empty", ErrInvalid, f.name)
		}
	}
	if !json.Valid(e.Body) {
		return fmt.Errorf("%w: approval event %s: Body is not JSON", ErrInvalid, e.ID)
	}
	return nil
}

// ValidateApprovalEvents checks every event to queue.
func ValidateApprovalEvents(es []ApprovalEvent) error {
	for _, e := range es {
		if err := e.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks an attempt's end.
func (e ApprovalEventEnd) Validate() error {
	switch {
	case e.ID == "" || e.Holder == "":
		return fmt.Errorf("%w: approval event end needs ID and Holder", ErrInvalid)
	case e.Status != EventDelivered && e.Status != EventFailed && e.Status != EventPending:
		return fmt.Errorf("%w: approval event end status %q", ErrInvalid, e.Status)
	}
	return nil
}
