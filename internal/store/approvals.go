package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Approval states. A call moves pending → approved → running → dispatched → done (or
// failed), or pending → rejected, or pending → expired, or pending → withdrawn; each move is a compare-and-set in the
// store, so an approved call runs once however many replicas are asked to approve it.
// approved and running are held under a lease (ClaimedBy, LeaseUntil): recovery moves one
// whose holder is gone back to pending (it never reached its runner), and a dispatched one to
// interrupted (it may have reached its provider; its outcome is unknown). docs/approvals.md.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalRejected = "rejected"
	ApprovalExpired  = "expired"
	ApprovalRunning  = "running"
	// ApprovalDispatched: handed to the runner; the provider may have been called.
	ApprovalDispatched = "dispatched"
	ApprovalDone       = "done"
	ApprovalFailed     = "failed"
	// ApprovalInterrupted is terminal: dispatched, then its holder stopped before the
	// outcome was recorded. It is never run again.
	ApprovalInterrupted = "interrupted"
	// ApprovalWithdrawn is terminal: its requester cancelled it while it was pending.
	ApprovalWithdrawn = "withdrawn"
)

var approvalStates = map[string]bool{ApprovalPending: true, ApprovalApproved: true, ApprovalRejected: true,
	ApprovalExpired: true, ApprovalRunning: true, ApprovalDispatched: true, ApprovalDone: true, ApprovalFailed: true,
	ApprovalInterrupted: true, ApprovalWithdrawn: true}

// ApprovalInFlight are the states a live holder moves on; recovery takes them from a holder
// that is gone.
var ApprovalInFlight = []string{ApprovalApproved, ApprovalRunning, ApprovalDispatched}

// Approval is a call held until a person approves it, with its validated input.
type Approval struct {
	ID      string
	Org     string // the requester's org: only its people see or decide the call
	AuditID string // the audit record of the original call; every later step links to it
	Ref     string
	Biome   string
	// BiomeVersion is the version of Biome the call was routed to (pinned by the org's grant);
	// PolicyRevision the policy bundle that held it; RiskTier the capability's.
	BiomeVersion   string
	PolicyRevision string
	RiskTier       string
	RequesterRef   string
	Environment    string
	Exec           json.RawMessage // the requester's execution context, to run the call as them
	Input          json.RawMessage // the validated input
	Status         string
	DecidedBy      string
	Reason         string
	Outcome        string
	Output         json.RawMessage // set once the call has run
	// Answer is the answer the run gave its requester, as the gateway encodes it (status and
	// body), set once the call has run; the store keeps it opaque.
	Answer    json.RawMessage
	CreatedAt time.Time
	ExpiresAt time.Time
	UpdatedAt time.Time
	// ClaimedBy is the replica moving the approval through approved/running/dispatched;
	// LeaseUntil is when another replica may recover it.
	ClaimedBy  string
	LeaseUntil time.Time
	// CallKey identifies the call (requester context, ref, biome version, input): at most one
	// pending approval of an org has a given key, so an identical call joins the pending one.
	// Written with the approval only; "" joins nothing.
	CallKey string
}

// Validate checks what the store itself requires of a new approval.
func (a Approval) Validate() error {
	for _, f := range []struct{ name, v string }{{"ID", a.ID}, {"Org", a.Org}, {"AuditID", a.AuditID}, {"Ref", a.Ref},
		{"RequesterRef", a.RequesterRef}, {"Environment", a.Environment}} {
		if f.v == "" {
			return fmt.Errorf("%w: approval %s is empty", ErrInvalid, f.name)
		}
	}
	if a.Status != ApprovalPending {
		return fmt.Errorf("%w: a new approval is %q, want %q", ErrInvalid, a.Status, ApprovalPending)
	}
	if !json.Valid(a.Input) || !json.Valid(a.Exec) {
		return fmt.Errorf("%w: approval Input and Exec must be JSON documents", ErrInvalid)
	}
	if !a.ExpiresAt.After(a.CreatedAt) {
		return fmt.Errorf("%w: approval ExpiresAt must be after CreatedAt", ErrInvalid)
	}
	return nil
}

// ApprovalFilter narrows ListApprovals; empty fields match everything.
type ApprovalFilter struct {
	Org          string
	Status       string
	Biome        string
	Ref          string
	RequesterRef string
	Limit        int // 0 means 100
	// After, when set, lists only the approvals after it in the list's order (newest first):
	// the keyset of the page before.
	After *ApprovalKey
	// ExpiredBy, when set, lists only pending approvals whose expiry is at or before it,
	// oldest first (the expiry sweep).
	ExpiredBy time.Time
}

// ApprovalKey is an approval's place in ListApprovals' order.
type ApprovalKey struct {
	CreatedAt time.Time
	ID        string
}

// ApprovalTransition is one compare-and-set move of an approval.
type ApprovalTransition struct {
	ID   string
	From string
	To   string
	At   time.Time
	// Live refuses the move when the approval has expired at At (ExpiresAt <= At).
	Live bool
	// DecidedBy and Reason are written when non-empty; Outcome, Output and Answer likewise.
	DecidedBy string
	Reason    string
	Outcome   string
	Output    json.RawMessage
	Answer    json.RawMessage
	// Claim, when set, records the replica taking the approval; LeaseUntil, when not zero,
	// how long its claim holds.
	Claim      string
	LeaseUntil time.Time
	// Holder, when set, moves the approval only if it is claimed by Holder.
	Holder string
	// Reset clears DecidedBy and the claim (an approval going back to pending).
	Reset bool
	// Events are queued in the approval_events outbox with the move, only if it wins.
	Events []ApprovalEvent `json:",omitempty"`
}

// Validate checks the states named by t.
func (t ApprovalTransition) Validate() error {
	if t.ID == "" {
		return fmt.Errorf("%w: approval transition ID is empty", ErrInvalid)
	}
	if !approvalStates[t.From] || !approvalStates[t.To] {
		return fmt.Errorf("%w: approval transition %q → %q names an unknown state", ErrInvalid, t.From, t.To)
	}
	if len(t.Output) > 0 && !json.Valid(t.Output) || len(t.Answer) > 0 && !json.Valid(t.Answer) {
		return fmt.Errorf("%w: approval Output and Answer must be JSON", ErrInvalid)
	}
	return ValidateApprovalEvents(t.Events)
}

// ObligationStore holds the state behind a decision's obligations: calls waiting for
// approval and the rate-limit and quota counters shared by every replica.
type ObligationStore interface {
	// PutApproval stores a new pending approval, and queues events in the approval_events
	// outbox in the same transaction; a stored ID, or a pending approval of the org with the
	// same CallKey, is ErrConflict.
	PutApproval(ctx context.Context, a Approval, events ...ApprovalEvent) error
	GetApproval(ctx context.Context, id string) (Approval, error)
	// PendingApproval is org's pending approval with callKey (non-empty); ErrNotFound when
	// there is none.
	PendingApproval(ctx context.Context, org, callKey string) (Approval, error)
	// ListApprovals returns the approvals matching f, newest first (ties by id, descending);
	// with f.ExpiredBy, oldest expiry first.
	ListApprovals(ctx context.Context, f ApprovalFilter) ([]Approval, error)
	// CountPendingApprovals counts requester's pending approvals in org, reading at most
	// limit (positive) of them: the answer is min(count, limit).
	CountPendingApprovals(ctx context.Context, org, requester string, limit int) (int, error)
	// TransitionApproval moves an approval if, and only if, it is in state t.From (and, with
	// t.Live, not expired). ErrNotFound for an unknown id, ErrConflict otherwise; the
	// returned approval is the stored one after the move, or as it is on ErrConflict.
	TransitionApproval(ctx context.Context, t ApprovalTransition) (Approval, error)
	// StaleApprovals returns at most limit approvals in an ApprovalInFlight state that are
	// claimed by holder, or whose lease ended at or before now, oldest first. An empty
	// holder returns only those whose lease ended.
	StaleApprovals(ctx context.Context, holder string, now time.Time, limit int) ([]Approval, error)
	ApprovalEventStore

	// AddUsage adds every add, or none, atomically: each applies only if its counter stays
	// within its limit. refused is -1 when all were added, and counts[i] is add i's counter
	// afterwards; otherwise it is the index of the first add (in the order given) that would
	// have passed its limit, nothing was added, and counts is nil.
	AddUsage(ctx context.Context, adds []UsageAdd) (counts []int64, refused int, err error)
	// PruneUsage deletes at most limit counters whose window ended before before, and says
	// how many went.
	PruneUsage(ctx context.Context, before time.Time, limit int) (int64, error)
	// LoadUsage returns every counter whose window ends after after.
	LoadUsage(ctx context.Context, after time.Time) ([]UsageCount, error)
	// SaveUsage writes counts in one transaction, each as its counter's value unless the
	// stored one is larger (counts only grow within a window). Nothing is refused: the
	// counts were admitted by an exact counter of their own (ratelimit.Memory).
	SaveUsage(ctx context.Context, counts []UsageCount) error
}

// UsageAdd is N more calls on the counter of (Key, Window), refused past Limit. Expires is
// when the window ends: its row may be pruned after that.
type UsageAdd struct {
	Key     string
	Window  int64
	N       int64
	Limit   int64
	Expires time.Time
}

// UsageCount is the value of the counter of (Key, Window), whose window ends at Expires.
type UsageCount struct {
	Key     string
	Window  int64
	Count   int64
	Expires time.Time
}

// Validate checks what the schema requires of a counter.
// ValidateUsageAdds checks a batch of adds as every counter must before counting any:
// non-empty keys, positive n and limit.
func ValidateUsageAdds(adds []UsageAdd) error {
	for i, a := range adds {
		if a.Key == "" || a.N <= 0 || a.Limit <= 0 {
			return fmt.Errorf("add usage to %d counter(s): add %d (%q window %d): %w: key must be non-empty, n and limit positive (n %d, limit %d)",
				len(adds), i, a.Key, a.Window, ErrInvalid, a.N, a.Limit)
		}
	}
	return nil
}

func (c UsageCount) Validate() error {
	if c.Key == "" || c.Count < 0 {
		return fmt.Errorf("%w: usage count %q window %d: key must be non-empty, count not negative (count %d)",
			ErrInvalid, c.Key, c.Window, c.Count)
	}
	return nil
}
