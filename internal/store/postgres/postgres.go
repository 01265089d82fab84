// Package postgres is the production store engine: PostgreSQL through a pgx v5 pool.
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/sqlstore"
)

// Store is the PostgreSQL engine of store.Store.
type Store struct {
	*sqlstore.Store
	pool, counterPool *pgxpool.Pool
}

// Dialect is how PostgreSQL differs: $n placeholders, timestamptz, SQLSTATE codes, and an
// advisory lock that serialises migrations across replicas.
var Dialect = sqlstore.Dialect{
	Name:           "postgres",
	NumberedParams: true,
	TimeArg:        func(t time.Time) any { return t },
	Classify:       classify,
	MigrationLock:  `SELECT pg_advisory_xact_lock(7305916246)`,
	ModifyingCTE:   true,
	ReasonCodeMatch: `EXISTS (SELECT 1 FROM json_array_elements(CASE WHEN json_typeof(reasons) = 'array' THEN reasons ELSE '[]'::json END) e
		WHERE e->>'code' = ?)`,
	Greatest:   "GREATEST",
	Least:      "LEAST",
	RollupLock: `SELECT id FROM audit_rollup_lock WHERE id = 1 FOR UPDATE`,
	SnapshotTx: &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true},
}

// asyncCommit is the session setting of the pool the rate and quota counters use
// (sqlstore.Store.WithCounters). A counter's increment commits without waiting for its WAL
// to reach the disk, which saved one fsync wait per call. Nothing that ran is lost by it:
// a call runs only after its decision record has committed synchronously, in a later
// transaction, and a synchronous commit flushes the whole WAL up to its own commit record,
// the earlier increment's included (one WAL per server, whichever replica or connection
// wrote it). A server crash can lose only the increments of calls whose record had not
// committed: calls that never ran. Other replicas see an increment when it commits, as
// before: the counters stay exact across replicas.
var asyncCommit = map[string]string{"synchronous_commit": "off", "application_name": counterSessions}

// counterSessions names the counter pool's sessions (pg_stat_activity.application_name).
const counterSessions = "xema-counters"

// Open connects to the server at dsn (postgres://...), applies pending migrations and
// creates the audit log's partitions of the next store.AuditPartitionsAhead days. It keeps two pools:
// one for everything, one for the counters (asyncCommit).
func Open(ctx context.Context, dsn string) (*Store, error) {
	pool, db, err := connect(ctx, dsn, nil)
	if err != nil {
		return nil, err
	}
	if _, err := sqlstore.Migrate(ctx, db, Dialect); err != nil {
		_ = db.Close() // the migration error is the one to report
		pool.Close()
		return nil, fmt.Errorf("open postgres store: %w", err)
	}
	counterPool, counters, err := connect(ctx, dsn, asyncCommit)
	if err != nil {
		_ = db.Close() // the connect error is the one to report
		pool.Close()
		return nil, err
	}
	s := &Store{Store: sqlstore.New(db, Dialect).WithCounters(counters).WithCountQuery(countsOn(counterPool)),
		pool: pool, counterPool: counterPool}
	now := time.Now()
	if _, err := s.EnsureAuditPartitions(ctx, now, now.Add((store.AuditPartitionsAhead-1)*24*time.Hour)); err != nil {
		_ = s.Close() // the partitions' error is the one to report
		return nil, fmt.Errorf("open postgres store: %w", err)
	}
	return s, nil
}

// Migrate applies pending migrations on the server at dsn and returns their versions.
func Migrate(ctx context.Context, dsn string) ([]string, error) {
	pool, db, err := connect(ctx, dsn, nil)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	defer db.Close()
	applied, err := sqlstore.Migrate(ctx, db, Dialect)
	if err != nil {
		return applied, fmt.Errorf("migrate postgres store: %w", err)
	}
	return applied, nil
}

// Close closes the pools as well as their database/sql views.
func (s *Store) Close() error {
	err := s.Store.Close()
	s.pool.Close()
	s.counterPool.Close()
	return err
}

// connect opens a pool on dsn whose sessions also set params.
func connect(ctx context.Context, dsn string, params map[string]string) (*pgxpool.Pool, *sql.DB, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// The DSN is not repeated: it may hold a password.
		return nil, nil, fmt.Errorf("%w: postgres DSN does not parse: %w", store.ErrInvalid, errors.Unwrap(err))
	}
	maps.Copy(cfg.ConnConfig.RuntimeParams, params)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connect postgres store: %w: %w", store.ErrUnavailable, err)
	}
	return pool, stdlib.OpenDBFromPool(pool), nil
}

func classify(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23505", pe.Code == "40001", pe.Code == "40P01":
			return store.ErrConflict
		case pe.Code == "23503":
			return store.ErrNotFound
		case pe.Code == "23514", pe.Code == "23502", strings.HasPrefix(pe.Code, "22"):
			return store.ErrInvalid
		case strings.HasPrefix(pe.Code, "08"), strings.HasPrefix(pe.Code, "53"), strings.HasPrefix(pe.Code, "57P"),
			strings.HasPrefix(pe.Code, "58"):
			return store.ErrUnavailable
		}
		return nil
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, driver.ErrBadConn) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return store.ErrUnavailable
	}
	return nil
}

// revisionChannel is notified by the store's trigger, in the transaction of every change to
// policy data, with the new revision as payload.
const revisionChannel = "xema_policy_revision"

// SubscribeRevisions implements store.RevisionSubscriber with LISTEN/NOTIFY on a connection
// of its own (taken out of the pool). Notifications sent while it was not connected are lost,
// so onConnect runs after every LISTEN to let the caller catch up.
func (s *Store) SubscribeRevisions(ctx context.Context, onConnect func(), onRevision func(rev int64)) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("subscribe to policy revisions: connect: %w", err)
	}
	conn := pc.Hijack() // LISTEN state must not return to the pool
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+revisionChannel); err != nil {
		return fmt.Errorf("subscribe to policy revisions: listen: %w", err)
	}
	onConnect()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("subscribe to policy revisions: wait: %w", err)
		}
		rev, err := strconv.ParseInt(n.Payload, 10, 64)
		if err != nil {
			rev = -1 // unreadable: the caller rebuilds
		}
		onRevision(rev)
	}
}
