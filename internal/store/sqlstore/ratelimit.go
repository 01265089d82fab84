package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// upsertUsage adds to one counter; its update only applies below the limit, and the row is
// locked for the statement, so concurrent adders on any number of connections (and
// replicas) never pass the limit together. No row back means refused.
const upsertUsage = `INSERT INTO rate_counters (key, window_no, count, expires_at)
	VALUES (?, ?, ?, ?)
	ON CONFLICT (key, window_no) DO UPDATE SET count = rate_counters.count + excluded.count
	WHERE rate_counters.count + excluded.count <= ?
	RETURNING count`

// errRefused rolls back a transaction of AddUsage in which a counter refused.
var errRefused = errors.New("usage refused")

// AddUsage implements store.ObligationStore. One add is one UPSERT; several run in one
// transaction, taken in (key, window) order so concurrent callers lock rows in the same
// order, and roll back together when any refuses.
func (s *Store) AddUsage(ctx context.Context, adds []store.UsageAdd) ([]int64, int, error) {
	op := fmt.Sprintf("add usage to %d counter(s)", len(adds))
	for i, a := range adds {
		if a.Key == "" || a.N <= 0 || a.Limit <= 0 {
			return nil, -1, fmt.Errorf("%s: add %d (%q window %d): %w: key must be non-empty, n and limit positive (n %d, limit %d)",
				op, i, a.Key, a.Window, store.ErrInvalid, a.N, a.Limit)
		}
	}
	for i, a := range adds {
		if a.N > a.Limit {
			return nil, i, nil
		}
	}
	if len(adds) == 1 {
		count, ok, err := s.addUsage(ctx, s.db, adds[0])
		switch {
		case err != nil:
			return nil, -1, s.fail(op, err)
		case !ok:
			return nil, 0, nil
		}
		return []int64{count}, -1, nil
	}
	order := make([]int, len(adds))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int {
		return cmp.Or(cmp.Compare(adds[i].Key, adds[j].Key), cmp.Compare(adds[i].Window, adds[j].Window))
	})
	counts, refused := make([]int64, len(adds)), -1
	err := s.inTx(ctx, op, func(tx *sql.Tx) error {
		for _, i := range order {
			count, ok, err := s.addUsage(ctx, tx, adds[i])
			if err != nil {
				return s.fail(op, err)
			}
			if !ok && (refused < 0 || i < refused) {
				refused = i
			}
			counts[i] = count
		}
		if refused >= 0 {
			return errRefused
		}
		return nil
	})
	switch {
	case errors.Is(err, errRefused):
		return nil, refused, nil
	case err != nil:
		return nil, -1, err
	}
	return counts, -1, nil
}

// addUsage is one UPSERT; ok is false when the counter refused it.
func (s *Store) addUsage(ctx context.Context, c conn, a store.UsageAdd) (count int64, ok bool, err error) {
	err = c.QueryRowContext(ctx, s.d.bind(upsertUsage), a.Key, a.Window, a.N, s.d.TimeArg(a.Expires.UTC()), a.Limit).Scan(&count)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return count, err == nil, err
}

// PruneUsage implements store.ObligationStore: one bounded DELETE on the expiry index.
func (s *Store) PruneUsage(ctx context.Context, before time.Time, limit int) (int64, error) {
	op := fmt.Sprintf("prune usage counters expired before %s", before.UTC().Format(time.RFC3339))
	if limit <= 0 {
		return 0, fmt.Errorf("%s: %w: limit must be positive, got %d", op, store.ErrInvalid, limit)
	}
	n, err := s.exec(ctx, s.db, `DELETE FROM rate_counters WHERE (key, window_no) IN
		(SELECT key, window_no FROM rate_counters WHERE expires_at < ? LIMIT ?)`, s.d.TimeArg(before.UTC()), limit)
	if err != nil {
		return 0, s.fail(op, err)
	}
	return n, nil
}
