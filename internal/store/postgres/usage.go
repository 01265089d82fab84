package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/sqlstore"
)

// AddUsage implements store.ObligationStore: a call's counters are added by sqlstore's one
// statement (every counter or none), sent on the counters' pgx pool itself: through
// database/sql it cost a quarter of a call's CPU in the gateway, a third of that the
// database/sql layer's own. A refusal, and the cases the statement does not cover, are
// answered by sqlstore's AddUsage (which tells which counter refused).
func (s *Store) AddUsage(ctx context.Context, adds []store.UsageAdd) ([]int64, int, error) {
	if err := store.ValidateUsageAdds(adds); err != nil {
		return nil, -1, err
	}
	q, args, ok := s.UsageAddsAtOnce(adds)
	if !ok {
		return s.Store.AddUsage(ctx, adds)
	}
	rows, _ := s.counterPool.Query(ctx, q, args...) // its error is the rows'
	counts, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	switch {
	case sqlstore.UsageRefused(err):
		return s.Store.AddUsage(ctx, adds)
	case err != nil:
		return nil, -1, fmt.Errorf("add usage to %d counter(s): %w", len(adds), wrap(err))
	case len(counts) != len(adds):
		return nil, -1, fmt.Errorf("add usage to %d counter(s): %d counts back", len(adds), len(counts))
	}
	return counts, -1, nil
}
