package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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
	if err := store.ValidateUsageAdds(adds); err != nil {
		return nil, -1, err
	}
	for i, a := range adds {
		if a.N > a.Limit {
			return nil, i, nil
		}
	}
	if len(adds) == 1 {
		count, ok, err := s.addUsage(ctx, s.counters, adds[0])
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
	err := s.inTxOn(ctx, s.counters, op, func(tx *sql.Tx) error {
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

// LoadUsage implements store.ObligationStore.
func (s *Store) LoadUsage(ctx context.Context, after time.Time) ([]store.UsageCount, error) {
	op := fmt.Sprintf("load usage counters live after %s", after.UTC().Format(time.RFC3339))
	rows, err := s.db.QueryContext(ctx, s.d.bind(`SELECT key, window_no, count, expires_at FROM rate_counters WHERE expires_at > ?`),
		s.d.TimeArg(after.UTC()))
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer rows.Close()
	var out []store.UsageCount
	for rows.Next() {
		var c store.UsageCount
		if err := rows.Scan(&c.Key, &c.Window, &c.Count, timeCol{&c.Expires}); err != nil {
			return nil, s.fail(op, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(op, err)
	}
	return out, nil
}

// SaveUsage implements store.ObligationStore.
func (s *Store) SaveUsage(ctx context.Context, counts []store.UsageCount) error {
	if len(counts) == 0 {
		return nil
	}
	op := fmt.Sprintf("save %d usage counter(s)", len(counts))
	if err := validateCounts(op, counts); err != nil {
		return err
	}
	return s.runSteps(ctx, op, s.usageSteps(nil, counts))
}

func validateCounts(op string, counts []store.UsageCount) error {
	for i, c := range counts {
		if err := c.Validate(); err != nil {
			return fmt.Errorf("%s: counter %d: %w", op, i, err)
		}
	}
	return nil
}

// usageRowsPerInsert bounds one UPSERT of usageSteps (4 placeholders a row; a power of two).
const usageRowsPerInsert = 256

// usageSteps appends to steps the UPSERTs writing counts, many rows a statement, each
// keeping the larger count.
func (s *Store) usageSteps(steps []step, counts []store.UsageCount) []step {
	for chunk := range pow2Chunks(counts, usageRowsPerInsert) {
		args := make([]any, 0, 4*len(chunk))
		for _, c := range chunk {
			args = append(args, c.Key, c.Window, c.Count, s.d.TimeArg(c.Expires.UTC()))
		}
		steps = append(steps, step{s.usageUpsert(len(chunk)), args})
	}
	return steps
}

// usageUpserts caches the UPSERT of n counters per placeholder style, as auditInserts.
var usageUpserts sync.Map // auditInsertKey → string

func (s *Store) usageUpsert(rows int) string {
	key := auditInsertKey{s.d.NumberedParams, rows}
	if q, ok := usageUpserts.Load(key); ok {
		return q.(string)
	}
	var b strings.Builder
	b.WriteString("INSERT INTO rate_counters (key, window_no, count, expires_at) VALUES ")
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?)")
	}
	b.WriteString(` ON CONFLICT (key, window_no) DO UPDATE SET count = excluded.count WHERE excluded.count > rate_counters.count`)
	q, _ := usageUpserts.LoadOrStore(key, s.d.bind(b.String()))
	return q.(string)
}
