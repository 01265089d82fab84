package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/xemahq/xema/internal/store"
)

const approvalEventColumns = `id, org, approval_id, kind, target, body, status, attempts, last_error, next_at, created_at`

func scanApprovalEvent(sc scanner) (store.ApprovalEvent, error) {
	var e store.ApprovalEvent
	var body []byte
	err := sc.Scan(&e.ID, &e.Org, &e.ApprovalID, &e.Kind, &e.Target, &body, &e.Status, &e.Attempts, &e.LastError,
		timeCol{&e.NextAt}, timeCol{&e.CreatedAt})
	e.Body = jsonCol(body)
	return e, err
}

// withEvents runs fn in a transaction when the write queues events with it (the step and
// its notifications land together or not at all), else on the handle itself.
func (s *Store) withEvents(ctx context.Context, op string, events bool, fn func(c conn) error) error {
	if !events {
		return fn(s.db)
	}
	return s.inTx(ctx, op, func(tx *sql.Tx) error { return fn(tx) })
}

// queueEvents inserts events, pending and due at once, on c.
func (s *Store) queueEvents(ctx context.Context, c conn, op string, at time.Time, events []store.ApprovalEvent) error {
	now := s.d.TimeArg(store.Stamp(at))
	for _, e := range events {
		if _, err := s.exec(ctx, c, `INSERT INTO approval_events (`+approvalEventColumns+`, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, 0, '', ?, ?, ?)`,
			e.ID, e.Org, e.ApprovalID, e.Kind, e.Target, jsonArg(e.Body), store.EventPending, now, now, now); err != nil {
			return s.fail(fmt.Sprintf("%s: queue event %s", op, e.Kind), err)
		}
	}
	return nil
}

// ClaimApprovalEvents implements store.ApprovalEventStore: one UPDATE claims the due events
// whose lease has ended or that holder holds already (re-checked per row, so of two replicas
// claiming at once each row goes to one), then the claimed rows are read back.
func (s *Store) ClaimApprovalEvents(ctx context.Context, holder string, now, leaseUntil time.Time, limit int) ([]store.ApprovalEvent, error) {
	if holder == "" || limit <= 0 {
		return nil, fmt.Errorf("claim approval events: %w: want a holder and a positive limit", store.ErrInvalid)
	}
	op := "claim approval events"
	at, until := s.d.TimeArg(store.Stamp(now)), s.d.TimeArg(store.Stamp(leaseUntil))
	if _, err := s.exec(ctx, s.db, `UPDATE approval_events SET claimed_by = ?, lease_until = ?
		WHERE status = ? AND next_at <= ? AND (lease_until <= ? OR claimed_by = ?) AND id IN (
			SELECT id FROM approval_events WHERE status = ? AND next_at <= ? AND (lease_until <= ? OR claimed_by = ?)
			ORDER BY next_at, id LIMIT ?)`,
		holder, until, store.EventPending, at, at, holder, store.EventPending, at, at, holder, limit); err != nil {
		return nil, s.fail(op, err)
	}
	return list(ctx, s, op, scanApprovalEvent, `SELECT `+approvalEventColumns+` FROM approval_events
		WHERE status = ? AND claimed_by = ? AND lease_until = ? ORDER BY next_at, id`, store.EventPending, holder, until)
}

// EndApprovalEvent implements store.ApprovalEventStore.
func (s *Store) EndApprovalEvent(ctx context.Context, e store.ApprovalEventEnd) error {
	op := fmt.Sprintf("end approval event %q", e.ID)
	if err := e.Validate(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	at := store.Stamp(e.At)
	next := e.NextAt
	if next.IsZero() {
		next = at
	}
	n, err := s.exec(ctx, s.db, `UPDATE approval_events SET status = ?, attempts = attempts + 1, last_error = ?, next_at = ?,
		claimed_by = '', lease_until = ?, updated_at = ? WHERE id = ? AND status = ? AND claimed_by = ?`,
		e.Status, e.LastError, s.d.TimeArg(store.Stamp(next)), s.d.TimeArg(time.UnixMicro(0).UTC()), s.d.TimeArg(at),
		e.ID, store.EventPending, e.Holder)
	if err != nil {
		return s.fail(op, err)
	}
	if n == 0 {
		var id string
		if err := s.db.QueryRowContext(ctx, s.d.bind(`SELECT id FROM approval_events WHERE id = ?`), e.ID).Scan(&id); err != nil {
			return s.fail(op, err)
		}
		return fmt.Errorf("%s: %w: not pending under the claim of %s", op, store.ErrConflict, e.Holder)
	}
	return nil
}

// PruneApprovalEvents implements store.ApprovalEventStore.
func (s *Store) PruneApprovalEvents(ctx context.Context, before time.Time, limit int) (int64, error) {
	if limit <= 0 {
		limit = 1000
	}
	n, err := s.exec(ctx, s.db, `DELETE FROM approval_events WHERE id IN (SELECT id FROM approval_events
		WHERE status IN (?, ?) AND updated_at < ? LIMIT ?)`, store.EventDelivered, store.EventFailed,
		s.d.TimeArg(store.Stamp(before)), limit)
	if err != nil {
		return 0, s.fail("prune approval events", err)
	}
	return n, nil
}
