package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/xemahq/xema/internal/periodic"
)

// rollupChunk bounds the records one rollup transaction folds: SQLite's one writer is held
// for one chunk (tens of milliseconds), then appends go on.
const rollupChunk = 5000

// RollUpAudit folds the new audit records into the overview's rollups every `every`, until
// ctx ends (store.Store.AdvanceAuditRollups): each tick catches up in chunks, so a start over
// a large log catches up without one long transaction. Replicas take turns in the store.
func (a *App) RollUpAudit(ctx context.Context, every time.Duration) {
	periodic.Every(ctx, every, func(now time.Time) { a.rollUpAudit(ctx, now) })
}

// rollUpAudit is one tick of RollUpAudit.
func (a *App) rollUpAudit(ctx context.Context, now time.Time) {
	var folded int64
	for ctx.Err() == nil {
		p, err := a.Store.AdvanceAuditRollups(ctx, now, rollupChunk)
		if err != nil {
			if ctx.Err() == nil {
				slog.Warn("audit rollups: pass failed; retrying next tick", "err", err)
			}
			return
		}
		folded += p.Folded
		if p.Left == 0 && p.Recounted == 0 {
			break
		}
	}
	if folded > rollupChunk {
		slog.Info("audit rollups caught up", "records", folded)
	}
}
