package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/xemahq/xema/internal/store"
)

// The audit log is partitioned by UTC day (migration 0018): audit_log_pYYYYMMDD, the
// legacy partition of the rows from before the migration, and a DEFAULT partition for any
// row no day partition covers, so an append never fails for a missing partition.

// dropLockWait bounds how long a partition's drop waits for its lock on audit_log: appends
// queue behind a waiting ACCESS EXCLUSIVE request, so a drop that cannot have the lock at
// once (a long transaction on the log) gives up and the prune deletes in batches meanwhile.
const dropLockWait = 100 * time.Millisecond

// maxPartitionDays bounds one EnsureAuditPartitions call's range (a year and a day).
const maxPartitionDays = 367

var _ store.AuditPartitioner = (*Store)(nil)

// EnsureAuditPartitions implements store.AuditPartitioner: the day partitions of the UTC days
// from `from` to `to` (both included) that do not exist yet are created.
func (s *Store) EnsureAuditPartitions(ctx context.Context, from, to time.Time) (int, error) {
	first, last := day(from), day(to)
	if last.Before(first) {
		return 0, fmt.Errorf("create audit partitions: %w: %s is before %s", store.ErrInvalid, last.Format(time.DateOnly), first.Format(time.DateOnly))
	}
	days := int(last.Sub(first)/(24*time.Hour)) + 1
	if days > maxPartitionDays { // a zero or far time: hundreds of thousands of tables
		return 0, fmt.Errorf("create audit partitions: %w: %d days from %s, more than %d", store.ErrInvalid, days, first.Format(time.DateOnly), maxPartitionDays)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT audit_log_add_partitions($1::date, $2)`, first.Format(time.DateOnly), days).Scan(&n); err != nil {
		return 0, fmt.Errorf("create audit partitions from %s for %d days: %w", first.Format(time.DateOnly), days, wrap(err))
	}
	return n, nil
}

func day(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// DeletePrunedAudit implements store.Store: while a partition lies wholly beneath the prune
// checkpoints, one call drops it and returns its rows' count; then the records beneath the
// checkpoints left in the other partitions (the one holding the boundary, the DEFAULT one)
// are deleted in batches of at most limit, as on every engine.
func (s *Store) DeletePrunedAudit(ctx context.Context, limit int) (int64, error) {
	if limit < 1 {
		return s.Store.DeletePrunedAudit(ctx, limit) // refuses it
	}
	for {
		n, dropped, err := s.dropPrunedPartition(ctx)
		switch {
		case err != nil || dropped && n > 0:
			return n, err
		case !dropped:
			return s.Store.DeletePrunedAudit(ctx, limit)
		}
		// An empty partition (a day without calls) was dropped: 0 would read as done.
	}
}

// dropPrunedPartition drops the oldest partition whose range ends at or before the prune
// boundary when none of its chained records is above its chain's checkpoint; dropped is
// false when there is none such, or its lock was not had within dropLockWait.
func (s *Store) dropPrunedPartition(ctx context.Context) (rows int64, dropped bool, err error) {
	const op = "drop a pruned audit partition"
	// Oldest first; one holding a record above a checkpoint (an old time written late, past
	// its chain's boundary link) is left to the batched deletes.
	parts, err := s.pool.Query(ctx, `SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname)
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE i.inhparent = 'audit_log'::regclass
		AND audit_log_partition_end(c.oid) <= (SELECT pruned_before FROM audit_prune WHERE id = 1)
		ORDER BY audit_log_partition_end(c.oid)`)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", op, wrap(err))
	}
	names, err := pgx.CollectRows(parts, pgx.RowTo[string])
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", op, wrap(err))
	}
	for _, part := range names {
		var above *string
		if err := s.pool.QueryRow(ctx, `SELECT audit_log_partition_above($1::regclass)`, part).Scan(&above); err != nil {
			return 0, false, fmt.Errorf("%s %s: %w", op, part, wrap(err))
		}
		if above != nil {
			continue
		}
		rows, err := s.dropPartition(ctx, part)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "55P03" { // lock_not_available: the log is busy
			slog.Debug("audit partition drop postponed: audit_log is locked", "partition", part)
			return 0, false, nil
		}
		if err != nil {
			return 0, false, fmt.Errorf("%s %s: %w", op, part, wrap(err))
		}
		return rows, true, nil
	}
	return 0, false, nil
}

// dropPartition counts part's rows (part: its qualified name, quoted as the server quotes it), then drops it through audit_log_drop_partition (which
// checks again, under the lock, that all of it lies beneath the checkpoints). Pruners take
// turns (an advisory lock): two upgrading their locks on audit_log together would deadlock.
func (s *Store) dropPartition(ctx context.Context, part string) (int64, error) {
	var rows int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7305916248)`); err != nil {
			return err
		}
		// The overview's rollups count the dropped records no longer: every bucket before
		// the partition's end is counted again from the records left, as after a batched
		// delete (sqlstore's markStale), the rollup pass taking turns with this.
		if _, err := tx.Exec(ctx, Dialect.RollupLock); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO audit_rollup_stale (org, grain, bucket)
			SELECT DISTINCT org, grain, bucket FROM audit_rollup
			WHERE bucket < (extract(epoch FROM audit_log_partition_end($1::regclass)) * 1000000)::bigint
			ON CONFLICT DO NOTHING`, part); err != nil {
			return err
		}
		// Counted before the lock, so appends do not wait for the count: only records
		// beneath the checkpoints can be added to or removed from it meanwhile (another
		// prune's deletes), and the drop then removes what is there.
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+part).Scan(&rows); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, dropLockWait.Milliseconds())); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT audit_log_drop_partition($1::regclass)`, part)
		return err
	})
	return rows, err
}

// wrap types an engine error as the store's (classify).
func wrap(err error) error {
	if typed := classify(err); typed != nil {
		return fmt.Errorf("%w: %w", typed, err)
	}
	return err
}
