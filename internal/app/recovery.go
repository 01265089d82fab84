package app

// This file: the replica id and recovery at start (approvals this replica held before it
// stopped), and the periodic upkeep that recovers what other, gone replicas held.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/atomicfile"
	"github.com/xemahq/xema/internal/notify"
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
		// Authorization requests nobody finished: their state is useless once expired.
		if _, err := a.Store.PruneConnectionStates(ctx, now); err != nil && ctx.Err() == nil {
			slog.Warn("connection state prune failed; retrying next tick", "err", err)
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
