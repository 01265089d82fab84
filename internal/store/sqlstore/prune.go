package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// LastLinksBefore implements store.Store. A scan of every chain's records would hold
// SQLite's one connection for seconds on a large log (appends stalled 7 s behind it over a
// million records), so each chain is bisected on seq with small indexed lookups instead: a
// chain's times grow with its seq but for records made concurrently, so the highest seq older
// than before is taken exactly within linkWindow seqs of the bisection's point.
func (s *Store) LastLinksBefore(ctx context.Context, before time.Time) ([]store.ChainLink, error) {
	heads, err := s.ChainHeads(ctx)
	if err != nil {
		return nil, err
	}
	var out []store.ChainLink
	for _, h := range heads {
		l, ok, err := s.lastLinkBefore(ctx, h, before)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, l)
		}
	}
	return out, nil
}

// linkWindow is how far around the bisection's point LastLinksBefore looks for the exact link.
const linkWindow = 1000

func (s *Store) lastLinkBefore(ctx context.Context, h store.ChainHead, before time.Time) (store.ChainLink, bool, error) {
	const op = "audit links before the prune boundary"
	// at returns the first stored seq from seq on and its time (ok false past the chain's end).
	at := func(seq int64) (int64, time.Time, bool, error) {
		var got int64
		var t time.Time
		err := s.db.QueryRowContext(ctx, s.d.bind(`SELECT chain_seq, time FROM audit_log WHERE chain_id = ? AND chain_id <> ''
			AND chain_seq >= ? ORDER BY chain_seq LIMIT 1`), h.ChainID, seq).Scan(&got, timeCol{&t})
		if err == sql.ErrNoRows {
			return 0, time.Time{}, false, nil
		}
		if err != nil {
			return 0, time.Time{}, false, s.fail(op, err)
		}
		return got, t, true, nil
	}
	lo, hi := h.BaseSeq+1, h.Seq // the answer, if any, lies in [lo, hi]
	if lo > hi {
		return store.ChainLink{}, false, nil
	}
	for lo < hi { // the highest seq whose record is older than before, were times monotone
		mid := lo + (hi-lo+1)/2
		seq, t, ok, err := at(mid)
		if err != nil {
			return store.ChainLink{}, false, err
		}
		if ok && seq <= hi && t.Before(before) {
			lo = seq // a gap (records deleted by hand) moves lo past mid: still in range
		} else {
			hi = mid - 1
		}
	}
	var l store.ChainLink
	err := s.db.QueryRowContext(ctx, s.d.bind(`SELECT chain_id, chain_seq, chain_hash FROM audit_log WHERE chain_id = ? AND chain_id <> ''
		AND chain_seq BETWEEN ? AND ? AND time < ? ORDER BY chain_seq DESC LIMIT 1`),
		h.ChainID, max(h.BaseSeq+1, lo-linkWindow), lo+linkWindow, s.d.TimeArg(store.Stamp(before))).Scan(&l.ChainID, &l.Seq, &l.Hash)
	if err == sql.ErrNoRows {
		return store.ChainLink{}, false, nil
	}
	if err != nil {
		return store.ChainLink{}, false, s.fail(op, err)
	}
	return l, true, nil
}

// CheckpointPrune implements store.Store.
func (s *Store) CheckpointPrune(ctx context.Context, b store.PruneBoundary, bases []store.ChainHead) error {
	const op = "checkpoint audit prune"
	if b.Before.IsZero() {
		return fmt.Errorf("%s: %w: no boundary", op, store.ErrInvalid)
	}
	for _, h := range bases {
		if h.ChainID == "" || h.BaseSeq < 1 || h.BaseHash == "" || h.BaseMAC == "" {
			return fmt.Errorf("%s: %w: a base needs a chain id, a seq from 1, a hash and a MAC", op, store.ErrInvalid)
		}
	}
	return s.inTx(ctx, op, func(tx *sql.Tx) error {
		before, now := s.d.TimeArg(store.Stamp(b.Before)), s.d.TimeArg(store.Stamp(b.PrunedAt))
		n, err := s.exec(ctx, tx, `INSERT INTO audit_prune (id, pruned_before, pruned_at) VALUES (1, ?, ?)
			ON CONFLICT (id) DO UPDATE SET pruned_before = excluded.pruned_before, pruned_at = excluded.pruned_at
			WHERE excluded.pruned_before >= audit_prune.pruned_before`, before, now)
		if err != nil {
			return s.fail(op, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: %w: the log was pruned up to a later boundary already", op, store.ErrConflict)
		}
		for _, h := range bases {
			n, err := s.exec(ctx, tx, `UPDATE audit_chain_heads SET base_seq = ?, base_hash = ?, base_mac = ?
				WHERE chain_id = ? AND base_seq <= ? AND seq >= ?`, h.BaseSeq, h.BaseHash, h.BaseMAC, h.ChainID, h.BaseSeq, h.BaseSeq)
			if err != nil {
				return s.fail(op, err)
			}
			if n == 0 {
				var one int
				if err := tx.QueryRowContext(ctx, s.d.bind(`SELECT 1 FROM audit_chain_heads WHERE chain_id = ?`), h.ChainID).Scan(&one); err != nil {
					return s.fail(fmt.Sprintf("%s: chain %s", op, h.ChainID), err)
				}
				return fmt.Errorf("%s: chain %s: %w: its base is past seq %d already, or its head before it", op, h.ChainID, store.ErrConflict, h.BaseSeq)
			}
		}
		return nil
	})
}

// PruneBoundary implements store.Store.
func (s *Store) PruneBoundary(ctx context.Context) (store.PruneBoundary, error) {
	var b store.PruneBoundary
	err := s.db.QueryRowContext(ctx, `SELECT pruned_before, pruned_at FROM audit_prune WHERE id = 1`).
		Scan(timeCol{&b.Before}, timeCol{&b.PrunedAt})
	if err == sql.ErrNoRows {
		return store.PruneBoundary{}, nil
	}
	if err != nil {
		return b, s.fail("read the audit prune boundary", err)
	}
	return b, nil
}

// DeletePrunedAudit implements store.Store: one DELETE of at most limit ids a call, chosen
// through the chain index (or, for unchained records, the time index), so the write lock is
// held for one small batch at a time.
func (s *Store) DeletePrunedAudit(ctx context.Context, limit int) (int64, error) {
	n, err := s.deletePruned(ctx, limit)
	if err == nil && n > 0 && s.d.AfterPruneBatch != "" {
		if _, err := s.db.ExecContext(ctx, s.d.AfterPruneBatch); err != nil {
			return n, s.fail("delete pruned audit records: vacuum", err)
		}
	}
	return n, err
}

func (s *Store) deletePruned(ctx context.Context, limit int) (int64, error) {
	const op = "delete pruned audit records"
	if limit < 1 {
		return 0, fmt.Errorf("%s: %w: limit %d", op, store.ErrInvalid, limit)
	}
	heads, err := s.ChainHeads(ctx)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, h := range heads {
		if h.BaseSeq == 0 || total >= int64(limit) {
			continue
		}
		n, err := s.deleteChained(ctx, h.ChainID, h.BaseSeq, int64(limit)-total)
		if err != nil {
			return total, err
		}
		total += n
	}
	if total >= int64(limit) {
		return total, nil
	}
	b, err := s.PruneBoundary(ctx)
	if err != nil || b.Before.IsZero() {
		return total, err
	}
	n, err := s.exec(ctx, s.db, `DELETE FROM audit_log WHERE id IN
		(SELECT id FROM audit_log WHERE chain_id = '' AND time < ? LIMIT ?)`, s.d.TimeArg(store.Stamp(b.Before)), int64(limit)-total)
	if err != nil {
		return total, s.fail(op, err)
	}
	return total + n, nil
}

// deleteChained deletes at most limit records of chain at or below base and marks their
// buckets stale for the rollups (audit_rollup.go), in one transaction.
func (s *Store) deleteChained(ctx context.Context, chain string, base, limit int64) (int64, error) {
	const op = "delete pruned audit records"
	var n int64
	err := s.inTx(ctx, op, func(tx *sql.Tx) error {
		n = 0
		if err := s.lockRollups(ctx, tx, op); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, s.d.bind(`DELETE FROM audit_log WHERE id IN
			(SELECT id FROM audit_log WHERE chain_id = ? AND chain_id <> '' AND chain_seq <= ? ORDER BY chain_seq LIMIT ?)
			RETURNING org, time`), chain, base, limit)
		if err != nil {
			return s.fail(op, err)
		}
		deleted := map[orgTime]bool{}
		for rows.Next() {
			var d orgTime
			var at time.Time
			if err := rows.Scan(&d.org, timeCol{&at}); err != nil {
				rows.Close()
				return s.fail(op, err)
			}
			d.at = at.UnixMicro()
			deleted[d] = true
			n++
		}
		if err := rows.Close(); err != nil {
			return s.fail(op, err)
		}
		if err := rows.Err(); err != nil {
			return s.fail(op, err)
		}
		return s.markStale(ctx, tx, op, deleted)
	})
	return n, err
}
