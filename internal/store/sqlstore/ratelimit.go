package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	if q, args, ok := s.addsAtOnce(adds); ok {
		counts, err := s.addUsageAtOnce(ctx, q, args, len(adds))
		if !errors.Is(err, errRefused) {
			if err != nil {
				return nil, -1, s.fail(op, err)
			}
			return counts, -1, nil
		}
		// A counter refused and the statement added nothing: the statements below tell
		// which (or, counts having moved meanwhile, add them all).
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

// distinctCounters reports whether no two adds name the same counter (one statement may
// update a row once).
func distinctCounters(adds []store.UsageAdd) bool {
	for i, a := range adds {
		for _, b := range adds[:i] {
			if a.Key == b.Key && a.Window == b.Window {
				return false
			}
		}
	}
	return true
}

// usageRefusal marks the error usageAddsAtOnce raises when a counter refuses: a cast that
// fails at run time, only in that row, so the whole statement (autocommitted) adds nothing.
const usageRefusal = "xema usage refused"

// usageAddsAtOnce is upsertUsage for n counters in one statement, every one or none: the
// counters locked in (key, window) order as AddUsage's transaction does, and a refusal an
// error that aborts the statement. One round trip instead of four (BEGIN, two UPSERTs,
// COMMIT) for a call with a rate limit and a quota.
func usageAddsAtOnce(n int) string {
	var b strings.Builder
	b.WriteString("WITH adds (i, key, window_no, n, expires_at, lim) AS (VALUES ")
	writeRows(&b, n, "(?::int, ?::text, ?::bigint, ?::bigint, ?::timestamptz, ?::bigint)")
	b.WriteString(`), up AS (
	INSERT INTO rate_counters AS c (key, window_no, count, expires_at)
	SELECT key, window_no, n, expires_at FROM adds ORDER BY key, window_no
	ON CONFLICT (key, window_no) DO UPDATE SET count = c.count + excluded.count
	WHERE c.count + excluded.count <= (SELECT lim FROM adds a WHERE a.key = excluded.key AND a.window_no = excluded.window_no)
	RETURNING c.key, c.window_no, c.count)
SELECT CASE WHEN up.count IS NULL THEN ('` + usageRefusal + ` ' || a.i)::bigint ELSE up.count END
FROM adds a LEFT JOIN up ON up.key = a.key AND up.window_no = a.window_no ORDER BY a.i`)
	return b.String()
}

// addsAtOnce returns the statement adding to every counter of adds or to none
// (usageAddsAtOnce), bound to the dialect, and its arguments; it answers one count a row,
// in the order of adds, or fails with an error refusalOr recognises. ok is false where
// the statement does not apply: an engine without modifying CTEs, a counter named twice, an
// add over its limit alone (AddUsage answers those).
func (s *Store) addsAtOnce(adds []store.UsageAdd) (q string, args []any, ok bool) {
	if !s.d.ModifyingCTE || !distinctCounters(adds) {
		return "", nil, false
	}
	args = make([]any, 0, 6*len(adds))
	for i, a := range adds {
		if a.N > a.Limit {
			return "", nil, false
		}
		args = append(args, i, a.Key, a.Window, a.N, s.d.TimeArg(a.Expires.UTC()), a.Limit)
	}
	return s.statement("usage adds", len(adds), usageAddsAtOnce), args, true
}

// addUsageAtOnce runs q, addsAtOnce's statement for n adds, through countQuery when set;
// errRefused when a counter refused (nothing added).
func (s *Store) addUsageAtOnce(ctx context.Context, q string, args []any, n int) ([]int64, error) {
	if s.countQuery != nil {
		counts, err := s.countQuery(ctx, q, args)
		if err != nil {
			return nil, refusalOr(err)
		}
		if len(counts) != n {
			return nil, fmt.Errorf("%d counts back for %d counters", len(counts), n)
		}
		return counts, nil
	}
	rows, err := s.counters.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, refusalOr(err)
	}
	defer rows.Close()
	counts := make([]int64, 0, n)
	for rows.Next() {
		var c int64
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		counts = append(counts, c)
	}
	if err := rows.Err(); err != nil {
		return nil, refusalOr(err)
	}
	if len(counts) != n {
		return nil, fmt.Errorf("%d counts back for %d counters", len(counts), n)
	}
	return counts, nil
}

// refusalOr is errRefused for the error of usageAddsAtOnce's refusal, else err.
func refusalOr(err error) error {
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) && coded.SQLState() == "22P02" && strings.Contains(err.Error(), usageRefusal) {
		return errRefused
	}
	return err
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

// usageUpsert is the dialect's UPSERT of rows saved counters.
func (s *Store) usageUpsert(rows int) string {
	return s.statement("usage upsert", rows, usageUpsertText)
}

func usageUpsertText(rows int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO rate_counters (key, window_no, count, expires_at) VALUES ")
	writeRows(&b, rows, "(?, ?, ?, ?)")
	b.WriteString(` ON CONFLICT (key, window_no) DO UPDATE SET count = excluded.count WHERE excluded.count > rate_counters.count`)
	return b.String()
}
