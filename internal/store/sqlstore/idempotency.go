package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/xemahq/xema/internal/store"
)

const idempotencyColumns = `org, subject, key, input_hash, state, result, status, body, audit_id, created_at, expires_at`

func scanIdempotency(sc scanner) (store.IdempotencyRecord, error) {
	var r store.IdempotencyRecord
	var result, body []byte
	err := sc.Scan(&r.Org, &r.Subject, &r.Key, &r.InputHash, &r.State, &result, &r.Status, &body, &r.AuditID,
		timeCol{&r.CreatedAt}, timeCol{&r.ExpiresAt})
	r.Result, r.Body = jsonCol(result), jsonCol(body)
	return r, err
}

// ClaimIdempotency implements store.IdempotencyStore: an INSERT ... ON CONFLICT DO NOTHING
// (one winner), else a conditional UPDATE taking over an expired record (one winner again).
func (s *Store) ClaimIdempotency(ctx context.Context, r store.IdempotencyRecord) (store.IdempotencyRecord, bool, error) {
	op := fmt.Sprintf("claim idempotency key %q of %q", r.Key, r.Subject)
	r.CreatedAt, r.ExpiresAt = store.Stamp(r.CreatedAt), store.Stamp(r.ExpiresAt)
	r.State, r.Result, r.Status, r.Body = store.IdempotencyRunning, nil, 0, nil
	if err := r.Validate(); err != nil {
		return store.IdempotencyRecord{}, false, fmt.Errorf("%s: %w", op, err)
	}
	n, err := s.exec(ctx, s.db, `INSERT INTO idempotency_keys (`+idempotencyColumns+`) VALUES (?, ?, ?, ?, ?, NULL, 0, NULL, ?, ?, ?)
		ON CONFLICT (org, subject, key) DO NOTHING`, r.Org, r.Subject, r.Key, r.InputHash, r.State, r.AuditID,
		s.d.TimeArg(r.CreatedAt), s.d.TimeArg(r.ExpiresAt))
	if err != nil {
		return store.IdempotencyRecord{}, false, s.fail(op, err)
	}
	if n == 1 {
		return r, true, nil
	}
	n, err = s.exec(ctx, s.db, `UPDATE idempotency_keys SET input_hash = ?, state = ?, result = NULL, status = 0, body = NULL, audit_id = ?,
		created_at = ?, expires_at = ? WHERE org = ? AND subject = ? AND key = ? AND expires_at <= ?`,
		r.InputHash, r.State, r.AuditID, s.d.TimeArg(r.CreatedAt), s.d.TimeArg(r.ExpiresAt), r.Org, r.Subject, r.Key,
		s.d.TimeArg(r.CreatedAt))
	if err != nil {
		return store.IdempotencyRecord{}, false, s.fail(op, err)
	}
	if n == 1 {
		return r, true, nil
	}
	stored, err := scanIdempotency(s.db.QueryRowContext(ctx, s.d.bind(`SELECT `+idempotencyColumns+
		` FROM idempotency_keys WHERE org = ? AND subject = ? AND key = ?`), r.Org, r.Subject, r.Key))
	if err != nil {
		return store.IdempotencyRecord{}, false, s.fail(op, err)
	}
	return stored, false, nil
}

// CompleteIdempotency implements store.IdempotencyStore.
func (s *Store) CompleteIdempotency(ctx context.Context, c store.IdempotencyCompletion) error {
	op := fmt.Sprintf("complete idempotency key %q of %q", c.Key, c.Subject)
	if c.Status <= 0 {
		return fmt.Errorf("%s: %w: Status must be an HTTP status", op, store.ErrInvalid)
	}
	n, err := s.exec(ctx, s.db, `UPDATE idempotency_keys SET state = ?, result = ?, status = ?, body = ?,
		audit_id = CASE WHEN ? = '' THEN audit_id ELSE ? END
		WHERE org = ? AND subject = ? AND key = ? AND state = ?`, store.IdempotencyDone, jsonArg(c.Result), c.Status, string(c.Body),
		c.AuditID, c.AuditID, c.Org, c.Subject, c.Key, store.IdempotencyRunning)
	if err != nil {
		return s.fail(op, err)
	}
	if n == 1 {
		return nil
	}
	var state string
	err = s.db.QueryRowContext(ctx, s.d.bind(`SELECT state FROM idempotency_keys WHERE org = ? AND subject = ? AND key = ?`),
		c.Org, c.Subject, c.Key).Scan(&state)
	if err != nil {
		return s.fail(op, err)
	}
	return fmt.Errorf("%s: %w: the key is %s", op, store.ErrConflict, state)
}

// ReleaseIdempotency implements store.IdempotencyStore.
func (s *Store) ReleaseIdempotency(ctx context.Context, org, subject, key string) error {
	if _, err := s.exec(ctx, s.db, `DELETE FROM idempotency_keys WHERE org = ? AND subject = ? AND key = ? AND state = ?`,
		org, subject, key, store.IdempotencyRunning); err != nil {
		return s.fail(fmt.Sprintf("release idempotency key %q of %q", key, subject), err)
	}
	return nil
}

// PruneIdempotency implements store.IdempotencyStore.
func (s *Store) PruneIdempotency(ctx context.Context, before time.Time, limit int) (int64, error) {
	if limit <= 0 { // SQLite reads LIMIT -1 as no limit: every expired key at once
		return 0, fmt.Errorf("prune idempotency keys: %w: limit must be positive, got %d", store.ErrInvalid, limit)
	}
	n, err := s.exec(ctx, s.db, `DELETE FROM idempotency_keys WHERE (org, subject, key) IN
		(SELECT org, subject, key FROM idempotency_keys WHERE expires_at < ? LIMIT ?)`, s.d.TimeArg(store.Stamp(before)), limit)
	if err != nil {
		return 0, s.fail("prune idempotency keys", err)
	}
	return n, nil
}

// ProbeWrite implements store.HealthStore: one upsert of the replica's row.
func (s *Store) ProbeWrite(ctx context.Context, replica string, at time.Time) error {
	if replica == "" {
		return fmt.Errorf("probe write: %w: empty replica", store.ErrInvalid)
	}
	if _, err := s.exec(ctx, s.db, `INSERT INTO write_probe (replica, at) VALUES (?, ?)
		ON CONFLICT (replica) DO UPDATE SET at = excluded.at`, replica, s.d.TimeArg(store.Stamp(at))); err != nil {
		return s.fail("probe write", err)
	}
	return nil
}
