package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/store"
)

const approvalColumns = `id, audit_id, ref, biome, requester_ref, environment, exec, input, status, decided_by,
	reason, outcome, output, created_at, expires_at, updated_at, org, claimed_by, lease_until, answer, biome_version,
	policy_revision, risk_tier`

func scanApproval(sc scanner) (store.Approval, error) {
	var a store.Approval
	var exec, input, output, answer []byte
	err := sc.Scan(&a.ID, &a.AuditID, &a.Ref, &a.Biome, &a.RequesterRef, &a.Environment, &exec, &input, &a.Status,
		&a.DecidedBy, &a.Reason, &a.Outcome, &output, timeCol{&a.CreatedAt}, timeCol{&a.ExpiresAt}, timeCol{&a.UpdatedAt}, &a.Org,
		&a.ClaimedBy, timeCol{&a.LeaseUntil}, &answer, &a.BiomeVersion, &a.PolicyRevision, &a.RiskTier)
	a.Exec, a.Input, a.Output, a.Answer = jsonCol(exec), jsonCol(input), jsonCol(output), jsonCol(answer)
	return a, err
}

// PutApproval implements store.ObligationStore.
func (s *Store) PutApproval(ctx context.Context, a store.Approval, events ...store.ApprovalEvent) error {
	op := fmt.Sprintf("put approval %q of %q", a.ID, a.Ref)
	a.CreatedAt = store.Stamp(a.CreatedAt)
	a.ExpiresAt = a.ExpiresAt.UTC()
	if err := a.Validate(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := store.ValidateApprovalEvents(events); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return s.withEvents(ctx, op, len(events) > 0, func(c conn) error {
		if _, err := s.exec(ctx, c, `INSERT INTO approvals (`+approvalColumns+`, call_key)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?)`,
			a.ID, a.AuditID, a.Ref, a.Biome, a.RequesterRef, a.Environment, jsonArg(a.Exec), jsonArg(a.Input), a.Status,
			a.DecidedBy, a.Reason, a.Outcome, jsonArg(a.Output), s.d.TimeArg(a.CreatedAt), s.d.TimeArg(a.ExpiresAt),
			s.d.TimeArg(a.CreatedAt), a.Org, "", s.d.TimeArg(time.UnixMicro(0).UTC()), a.BiomeVersion, a.PolicyRevision,
			a.RiskTier, sql.NullString{String: a.CallKey, Valid: a.CallKey != ""}); err != nil {
			return s.fail(op, err)
		}
		return s.queueEvents(ctx, c, op, a.CreatedAt, events)
	})
}

// GetApproval implements store.ObligationStore.
func (s *Store) GetApproval(ctx context.Context, id string) (store.Approval, error) {
	a, err := scanApproval(s.db.QueryRowContext(ctx, s.d.bind(`SELECT `+approvalColumns+` FROM approvals WHERE id = ?`), id))
	if err != nil {
		return store.Approval{}, s.fail(fmt.Sprintf("get approval %q", id), err)
	}
	return a, nil
}

// PendingApproval implements store.ObligationStore, on the unique index of pending calls.
func (s *Store) PendingApproval(ctx context.Context, org, callKey string) (store.Approval, error) {
	op := fmt.Sprintf("get the pending approval of call %q in %q", callKey, org)
	if org == "" || callKey == "" {
		return store.Approval{}, fmt.Errorf("%s: org and call key are required: %w", op, store.ErrInvalid)
	}
	a, err := scanApproval(s.db.QueryRowContext(ctx, s.d.bind(`SELECT `+approvalColumns+` FROM approvals
		WHERE org = ? AND call_key = ? AND status = ?`), org, callKey, store.ApprovalPending))
	if err != nil {
		return store.Approval{}, s.fail(op, err)
	}
	return a, nil
}

// ListApprovals implements store.ObligationStore.
func (s *Store) ListApprovals(ctx context.Context, f store.ApprovalFilter) ([]store.Approval, error) {
	var where []string
	var args []any
	for _, c := range []struct{ col, v string }{{"org", f.Org}, {"status", f.Status}, {"biome", f.Biome}, {"ref", f.Ref},
		{"requester_ref", f.RequesterRef}} {
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	order := ` ORDER BY created_at DESC, id DESC`
	if f.After != nil {
		at := s.d.TimeArg(store.Stamp(f.After.CreatedAt))
		where = append(where, "(created_at < ? OR (created_at = ? AND id < ?))")
		args = append(args, at, at, f.After.ID)
	}
	if !f.ExpiredBy.IsZero() {
		where = append(where, "status = ? AND expires_at <= ?")
		args = append(args, store.ApprovalPending, s.d.TimeArg(f.ExpiredBy.UTC()))
		order = ` ORDER BY expires_at, id`
	}
	q := `SELECT ` + approvalColumns + ` FROM approvals`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	q += order + ` LIMIT ?`
	args = append(args, limit)
	return list(ctx, s, "list approvals", scanApproval, q, args...)
}

// CountPendingApprovals implements store.ObligationStore, on the requester's index.
func (s *Store) CountPendingApprovals(ctx context.Context, org, requester string, limit int) (int, error) {
	op := fmt.Sprintf("count pending approvals of %q in %q", requester, org)
	if org == "" || requester == "" || limit <= 0 {
		return 0, fmt.Errorf("%s: org and requester are required, limit must be positive (%d): %w", op, limit, store.ErrInvalid)
	}
	var n int
	if err := s.db.QueryRowContext(ctx, s.d.bind(`SELECT count(*) FROM (SELECT 1 FROM approvals
		WHERE requester_ref = ? AND org = ? AND status = ? LIMIT ?) AS pending`), requester, org, store.ApprovalPending, limit).Scan(&n); err != nil {
		return 0, s.fail(op, err)
	}
	return n, nil
}

// TransitionApproval implements store.ObligationStore: one conditional UPDATE, so of any
// number of concurrent movers exactly one wins.
func (s *Store) TransitionApproval(ctx context.Context, t store.ApprovalTransition) (store.Approval, error) {
	op := fmt.Sprintf("move approval %q from %q to %q", t.ID, t.From, t.To)
	if err := t.Validate(); err != nil {
		return store.Approval{}, fmt.Errorf("%s: %w", op, err)
	}
	at := s.d.TimeArg(store.Stamp(t.At))
	decidedBy := `decided_by = CASE WHEN ? = '' THEN decided_by ELSE ? END`
	if t.Reset {
		decidedBy = `decided_by = CASE WHEN ? = '' THEN '' ELSE ? END`
	}
	q := `UPDATE approvals SET status = ?, updated_at = ?, ` + decidedBy + `,
		reason = CASE WHEN ? = '' THEN reason ELSE ? END,
		outcome = CASE WHEN ? = '' THEN outcome ELSE ? END,
		output = COALESCE(?, output), answer = COALESCE(?, answer)`
	args := []any{t.To, at, t.DecidedBy, t.DecidedBy, t.Reason, t.Reason, t.Outcome, t.Outcome, jsonArg(t.Output), jsonArg(t.Answer)}
	if t.Reset {
		q += `, claimed_by = '', lease_until = ?`
		args = append(args, s.d.TimeArg(time.UnixMicro(0).UTC()))
	}
	if t.Claim != "" {
		q += `, claimed_by = ?`
		args = append(args, t.Claim)
	}
	if !t.LeaseUntil.IsZero() {
		q += `, lease_until = ?`
		args = append(args, s.d.TimeArg(store.Stamp(t.LeaseUntil)))
	}
	q += ` WHERE id = ? AND status = ?`
	args = append(args, t.ID, t.From)
	if t.Holder != "" {
		q += ` AND claimed_by = ?`
		args = append(args, t.Holder)
	}
	if t.Live {
		q += ` AND expires_at > ?`
		args = append(args, at)
	}
	var n int64
	err := s.withEvents(ctx, op, len(t.Events) > 0, func(c conn) error {
		var err error
		if n, err = s.exec(ctx, c, q, args...); err != nil {
			return s.fail(op, err)
		}
		if n == 0 {
			return nil
		}
		return s.queueEvents(ctx, c, op, t.At, t.Events)
	})
	if err != nil {
		return store.Approval{}, err
	}
	a, err := s.GetApproval(ctx, t.ID)
	if err != nil {
		return store.Approval{}, fmt.Errorf("%s: %w", op, err)
	}
	if n == 0 {
		return a, fmt.Errorf("%s: %w: approval is %q", op, store.ErrConflict, a.Status)
	}
	return a, nil
}

// StaleApprovals implements store.ObligationStore.
func (s *Store) StaleApprovals(ctx context.Context, holder string, now time.Time, limit int) ([]store.Approval, error) {
	if limit <= 0 {
		limit = 100
	}
	mine, args := "", []any{store.ApprovalApproved, store.ApprovalRunning, store.ApprovalDispatched}
	if holder != "" {
		mine, args = "claimed_by = ? OR ", append(args, holder)
	}
	q := `SELECT ` + approvalColumns + ` FROM approvals WHERE status IN (?, ?, ?) AND (` + mine + `lease_until <= ?)
		ORDER BY updated_at, id LIMIT ?`
	return list(ctx, s, "list stale approvals", scanApproval, q, append(args, s.d.TimeArg(store.Stamp(now)), limit)...)
}
