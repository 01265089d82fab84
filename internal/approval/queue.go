package approval

// This file: the queue the funnel holds calls in, and its per-subject bound.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/notify"
	"github.com/xemahq/xema/internal/store"
)

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
