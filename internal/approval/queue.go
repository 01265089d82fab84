package approval

// This file: the queue the funnel holds calls in, and its per-subject bound.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
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
		PendingApproval(ctx context.Context, org, callKey string) (store.Approval, error)
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

// Admit joins p to the identical call of its requester already pending, if there is one
// (nothing more is held), or else bounds ec's pending calls before anything of p is stored:
// TOO_MANY_PENDING when its requester has MaxPending calls pending already. A joined call
// adds none, so it is never refused for the bound. An admitted caller holds the requester's
// turn until it calls release, once the call is held (or not): concurrent identical calls on
// one replica are joined here, across replicas by the store's unique key (Hold).
func (q *Queue) Admit(ctx context.Context, p gateway.Pending) (joined *gateway.Joined, release func(), err error) {
	ec := p.Exec
	h := fnv.New32a()
	_, _ = h.Write([]byte(ec.Org + "\x00" + ec.Subject.Ref)) // a hash's Write never fails
	mu := &q.requesters[h.Sum32()%uint32(len(q.requesters))]
	mu.Lock()
	if joined, err = q.pending(ctx, p); joined != nil {
		return joined, mu.Unlock, nil
	}
	limit := cmp.Or(q.MaxPending, DefaultMaxPending)
	var n int
	if err == nil {
		n, err = q.Store.CountPendingApprovals(ctx, ec.Org, ec.Subject.Ref, limit)
	}
	switch {
	case err != nil:
		mu.Unlock()
		return nil, nil, fmt.Errorf("admit a held call of %s: %w", ec.Subject.Ref, err)
	case n >= limit:
		mu.Unlock()
		return nil, nil, fault.New(fault.RateLimited, CodeTooManyPending,
			"%s already has %d calls waiting for approval, as many as one subject may; this call was not held: wait for a decision, or withdraw one (MCP tasks/cancel)",
			ec.Subject.Ref, n)
	}
	return nil, mu.Unlock, nil
}

// pending is the call identical to p that waits for a decision, or nil.
func (q *Queue) pending(ctx context.Context, p gateway.Pending) (*gateway.Joined, error) {
	key, err := callKey(p)
	if err != nil {
		return nil, err
	}
	a, err := q.Store.PendingApproval(ctx, p.Exec.Org, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("find a pending call identical to %s of %s: %w", p.Ref, p.Exec.Subject.Ref, err)
	}
	return &gateway.Joined{ApprovalID: a.ID, AuditID: a.AuditID}, nil
}

// Hold stores the call, pending, until it expires. When an identical call was held meanwhile
// (on another replica: the store keeps one pending approval per call key), nothing is stored
// and joined names that call.
func (q *Queue) Hold(ctx context.Context, p gateway.Pending) (joined *gateway.Joined, err error) {
	exec, err := json.Marshal(p.Exec)
	if err != nil {
		return nil, fmt.Errorf("hold %s: encode execution context: %w", p.Ref, err)
	}
	key, err := callKey(p)
	if err != nil {
		return nil, err
	}
	now, ttl := time.Now(), cmp.Or(q.TTL, DefaultTTL)
	if q.Now != nil {
		now = q.Now()
	}
	a := store.Approval{ID: p.ID, Org: p.Exec.Org, AuditID: p.AuditID, Ref: p.Ref, Biome: p.Biome,
		BiomeVersion: p.BiomeVersion, PolicyRevision: p.PolicyRevision, RiskTier: p.RiskTier,
		RequesterRef: p.Exec.Subject.Ref, Environment: p.Exec.Environment, Exec: exec, Input: p.Input,
		Status: store.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(ttl), CallKey: key}
	var events []store.ApprovalEvent
	if q.Notify != nil {
		events = q.Notify.Events(a, notify.KindHeld, now)
	}
	err = q.Store.PutApproval(ctx, a, events...)
	if errors.Is(err, store.ErrConflict) {
		// The identical call won the key; if it was decided since, this one's conflict stands.
		if joined, perr := q.pending(ctx, p); perr != nil || joined != nil {
			return joined, perr
		}
	}
	if err != nil {
		return nil, err
	}
	if q.Notify != nil {
		q.Notify.Kick()
	}
	return nil, nil
}

// callKey is a held call's identity for joining: who asks in which context (what heldIn
// compares: an identical call joins only a task its caller may follow), what (ref, the biome
// version it was routed to) and its input, canonical, so key order and spacing do not count.
func callKey(p gateway.Pending) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(p.Input))
	dec.UseNumber()
	var input any
	if err := dec.Decode(&input); err != nil {
		return "", fmt.Errorf("hold %s: decode its validated input: %w", p.Ref, err)
	}
	id, err := json.Marshal([]any{p.Exec.Org, p.Exec.Subject.Ref, p.Exec.Environment, p.Exec.Project,
		armedSet(p.Exec.Armed), p.Ref, p.BiomeVersion, input}) // maps encode with sorted keys
	if err != nil {
		return "", fmt.Errorf("hold %s: encode its identity: %w", p.Ref, err)
	}
	sum := sha256.Sum256(id)
	return hex.EncodeToString(sum[:]), nil
}
