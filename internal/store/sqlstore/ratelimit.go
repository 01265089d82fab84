package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// AddUsage implements store.ObligationStore with one UPSERT whose update only applies
// below the limit: the row is locked for the statement, so concurrent adders on any number
// of connections (and replicas) never pass the limit together.
func (s *Store) AddUsage(ctx context.Context, key string, window int64, n, limit int64, expires time.Time) (int64, bool, error) {
	op := fmt.Sprintf("add %d to usage %q window %d", n, key, window)
	if key == "" || n <= 0 || limit <= 0 {
		return 0, false, fmt.Errorf("%s: %w: key must be non-empty, n and limit positive (limit %d)", op, store.ErrInvalid, limit)
	}
	if n > limit {
		return 0, false, nil
	}
	var count int64
	err := s.db.QueryRowContext(ctx, s.d.bind(`INSERT INTO rate_counters (key, window_no, count, expires_at)
		VALUES (?, ?, ?, ?)
		ON CONFLICT (key, window_no) DO UPDATE SET count = rate_counters.count + excluded.count
		WHERE rate_counters.count + excluded.count <= ?
		RETURNING count`), key, window, n, s.d.TimeArg(expires.UTC()), limit).Scan(&count)
	if errors.Is(err, sql.ErrNoRows) {
		err = s.db.QueryRowContext(ctx, s.d.bind(`SELECT count FROM rate_counters WHERE key = ? AND window_no = ?`),
			key, window).Scan(&count)
		if err != nil {
			return 0, false, s.fail(op, err)
		}
		return count, false, nil
	}
	if err != nil {
		return 0, false, s.fail(op, err)
	}
	return count, true, nil
}
