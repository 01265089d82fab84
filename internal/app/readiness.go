package app

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/outage"
)

// readiness caches the store's write probe: at most one probe per ProbeEvery, however often
// /readyz is asked.
type readiness struct {
	mu      sync.Mutex
	checked time.Time
	err     error
	down    bool
}

// ProbeEvery bounds how often /readyz writes to the store.
const ProbeEvery = time.Second

func (a *App) probeStore(ctx context.Context) error {
	if err := a.probeCached(ctx); err != nil {
		return err
	}
	if what, failed := a.outages.Recent(RecentFailureWindow, outage.AuditLog, outage.RateLimiter, outage.IdempotencyStore); failed {
		return fmt.Errorf("store refused a write of the %s within the last %v", what, RecentFailureWindow)
	}
	return nil
}

func (a *App) probeCached(ctx context.Context) error {
	r := &a.ready
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if !r.checked.IsZero() && now.Sub(r.checked) < ProbeEvery {
		return r.err
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := a.Store.ProbeWrite(pctx, a.Replica, now)
	r.checked, r.err = now, err
	switch {
	case err != nil && !r.down:
		r.down = true
		a.outages.Failed(outage.StoreProbe, err)
	case err == nil && r.down:
		r.down = false
		a.outages.OK(outage.StoreProbe)
	}
	if err != nil {
		r.err = fmt.Errorf("store cannot take a write: %w", err)
	}
	return r.err
}

// RecentFailureWindow: a store write a call needed that failed this recently fails /readyz
// even when the probe passes.
const RecentFailureWindow = 5 * time.Second

// Ready reports whether the gateway can serve: the store takes a write (a probe, cached for
// ProbeEvery), a policy bundle is loaded, the identity provider's keys are available, and it
// is not shutting down.
func (a *App) Ready(ctx context.Context) error {
	if a.draining.Load() {
		return errors.New("shutting down: draining in-flight calls")
	}
	if err := a.probeStore(ctx); err != nil {
		return err
	}
	if a.Policy.Revision() == "" {
		return errors.New("policy: no bundle loaded")
	}
	if a.KeysReady != nil {
		if err := a.KeysReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Drain marks the gateway as shutting down: /readyz fails from now on.
func (a *App) Drain() { a.draining.Store(true) }
