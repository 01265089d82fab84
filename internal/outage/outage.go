// Package outage tracks the dependencies calls need (policy, audit log, rate limiter, the
// store's idempotency and approval tables): an outage is logged once when it begins and once
// when it ends, with the number of calls it refused, instead of a line per failed call, and
// readiness asks which dependency failed a call recently. One Tracker is built by the app and
// handed to each part that reports to it.
package outage

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Dep names a tracked dependency, as the outage log names it.
type Dep string

// The dependencies calls report on.
const (
	Policy           Dep = "policy"
	AuditLog         Dep = "audit log"
	RateLimiter      Dep = "rate limiter"
	ApprovalStore    Dep = "approval store"
	IdempotencyStore Dep = "idempotency store"
	// StoreProbe is readiness' own write to the store.
	StoreProbe Dep = "store write probe"
)

// Tracker is the outage log of one process. A nil Tracker tracks nothing.
type Tracker struct {
	mu     sync.Mutex
	active atomic.Int32 // outages going on: OK costs one load while there are none
	by     map[Dep]*outage
	last   map[Dep]time.Time // the latest failure of each dependency
}

type outage struct {
	since   time.Time
	failed  int64
	lastErr string
}

// New returns a Tracker with no outage going on.
func New() *Tracker {
	return &Tracker{by: map[Dep]*outage{}, last: map[Dep]time.Time{}}
}

// Failed counts a failure of d; the first of an outage is logged.
func (t *Tracker) Failed(d Dep, err error) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.by[d]
	if cur == nil {
		cur = &outage{since: time.Now()}
		t.by[d] = cur
		t.active.Add(1)
		slog.Error("dependency unavailable: outage begins; calls needing it are refused until it ends", "what", string(d), "err", err)
	}
	cur.failed++
	cur.lastErr = fmt.Sprint(err)
	t.last[d] = time.Now()
}

// OK ends d's outage, if one is going on.
func (t *Tracker) OK(d Dep) {
	if t == nil || t.active.Load() == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.by[d]
	if cur == nil {
		return
	}
	delete(t.by, d)
	t.active.Add(-1)
	slog.Warn("dependency back: outage ended", "what", string(d), "duration", time.Since(cur.since).Round(time.Millisecond).String(),
		"failedCalls", cur.failed, "lastErr", cur.lastErr)
}

// Recent names a dependency among deps that failed a call within the last window, if one
// did: readiness fails on it (a write probe can pass while real writes fail, e.g. SQLite
// reusing WAL space on a full disk).
func (t *Tracker) Recent(window time.Duration, deps ...Dep) (Dep, bool) {
	if t == nil {
		return "", false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range deps {
		if at, ok := t.last[d]; ok && time.Since(at) < window {
			return d, true
		}
	}
	return "", false
}
