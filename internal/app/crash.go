package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/atomicfile"
	"github.com/xemahq/xema/internal/notify"
	"github.com/xemahq/xema/internal/outage"
	"github.com/xemahq/xema/internal/periodic"
)

// replicaFile holds this gateway's replica id under the data dir: stable across restarts, so
// a restarted replica recovers the approvals it held at once (docs/approvals.md).
const replicaFile = "replica-id"

func replicaID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, replicaFile)
	if raw, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(raw))) > 0 {
		return strings.TrimSpace(string(raw)), nil
	}
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := fmt.Sprintf("%s-%s", host, hex.EncodeToString(b[:]))
	// Whole or not at all: a kill mid-write must not leave an empty file, or the next start
	// would take a new id and wait out the leases of its own approvals instead of recovering
	// them at once.
	if err := atomicfile.Write(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("replica id: %w", err)
	}
	return id, nil
}

// recoverAtStart writes what the spool kept from the previous run, then ends the approvals
// the previous run (or a replica whose lease ended) left in flight.
func (a *App) recoverAtStart(ctx context.Context) error {
	if n := a.Spool.Len(); n > 0 {
		if err := a.Spool.Drain(ctx); err != nil {
			slog.Warn("outcome spool not drained at start; retrying in the background", "entries", a.Spool.Len(), "err", err)
		}
	}
	n, err := a.Approvals.Recover(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		slog.Warn("approvals recovered after a stop", "approvals", n)
	}
	return nil
}

// Maintain runs the periodic upkeep until ctx ends: approval recovery of leases that ended
// (other replicas that are gone), pruning of expired idempotency keys and approval events,
// expiry of undecided held calls.
func (a *App) Maintain(ctx context.Context, every time.Duration) {
	periodic.Every(ctx, every, func(now time.Time) {
		if n, err := a.Approvals.RecoverLeases(ctx); err != nil && ctx.Err() == nil {
			slog.Warn("approval recovery failed; retrying next tick", "err", err)
		} else if n > 0 {
			slog.Warn("approvals recovered: their holder's lease ended", "approvals", n)
		}
		if _, err := a.Store.PruneIdempotency(ctx, now, 1000); err != nil && ctx.Err() == nil {
			slog.Warn("idempotency key prune failed; retrying next tick", "err", err)
		}
		if n, err := a.Approvals.ExpireDue(ctx); err != nil && ctx.Err() == nil {
			slog.Warn("approval expiry sweep failed; retrying next tick", "err", err)
		} else if n > 0 {
			slog.Info("approvals expired undecided", "approvals", n)
		}
		if _, err := a.Store.PruneApprovalEvents(ctx, now.Add(-notify.PruneAfter), 1000); err != nil && ctx.Err() == nil {
			slog.Warn("approval notification prune failed; retrying next tick", "err", err)
		}
	})
}

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
