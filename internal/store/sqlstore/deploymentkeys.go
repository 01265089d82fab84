package sqlstore

import (
	"context"
	"database/sql"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// DeploymentKey implements store.Store: the candidate is inserted only if no key of that name
// is stored (ON CONFLICT DO NOTHING, on both engines), then the stored key is read back, so
// every replica returns the key of whichever replica wrote first.
func (s *Store) DeploymentKey(ctx context.Context, name string, candidate []byte) ([]byte, error) {
	op := fmt.Sprintf("deployment key %q", name)
	if name == "" || len(candidate) == 0 {
		return nil, fmt.Errorf("%s: %w: name and candidate must be non-empty", op, store.ErrInvalid)
	}
	if _, err := s.exec(ctx, s.db, `INSERT INTO deployment_keys (name, secret, created_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO NOTHING`, name, base64.StdEncoding.EncodeToString(candidate),
		s.d.TimeArg(store.Stamp(time.Now()))); err != nil {
		return nil, s.fail(op, err)
	}
	var enc string
	if err := s.db.QueryRowContext(ctx, s.d.bind(`SELECT secret FROM deployment_keys WHERE name = ?`), name).Scan(&enc); err != nil {
		return nil, s.fail(op, err)
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("%s: %w: the stored secret is not base64", op, store.ErrInvalid)
	}
	return key, nil
}

// ListDeploymentKeys implements store.Store.
func (s *Store) ListDeploymentKeys(ctx context.Context) ([]store.DeploymentKeyEntry, error) {
	return list(ctx, s, "list deployment keys", func(sc scanner) (store.DeploymentKeyEntry, error) {
		var e store.DeploymentKeyEntry
		var enc string
		if err := sc.Scan(&e.Name, &enc, timeCol{&e.CreatedAt}); err != nil {
			return e, err
		}
		var err error
		if e.Secret, err = base64.StdEncoding.DecodeString(enc); err != nil {
			return e, fmt.Errorf("deployment key %q: %w: the stored secret is not base64", e.Name, store.ErrInvalid)
		}
		return e, nil
	}, `SELECT name, secret, created_at FROM deployment_keys ORDER BY name`)
}

// ReplaceDeploymentKey implements store.Store: a compare-and-swap on the stored secret, so
// two replicas migrating or rotating one key at once change it once.
func (s *Store) ReplaceDeploymentKey(ctx context.Context, name string, old, next []byte, created time.Time, keep ...store.DeploymentKeyEntry) error {
	op := fmt.Sprintf("replace deployment key %q", name)
	if name == "" || len(old) == 0 || len(next) == 0 {
		return fmt.Errorf("%s: %w: name, old and next must be non-empty", op, store.ErrInvalid)
	}
	for _, k := range keep {
		if k.Name == "" || len(k.Secret) == 0 {
			return fmt.Errorf("%s: %w: a kept key needs a name and a secret", op, store.ErrInvalid)
		}
	}
	return s.inTx(ctx, op, func(tx *sql.Tx) error {
		n, err := s.exec(ctx, tx, `UPDATE deployment_keys SET secret = ?, created_at = ? WHERE name = ? AND secret = ?`,
			base64.StdEncoding.EncodeToString(next), s.d.TimeArg(store.Stamp(created)), name, base64.StdEncoding.EncodeToString(old))
		if err != nil {
			return s.fail(op, err)
		}
		if n == 0 {
			var one int
			if err := tx.QueryRowContext(ctx, s.d.bind(`SELECT 1 FROM deployment_keys WHERE name = ?`), name).Scan(&one); err != nil {
				return s.fail(op, err) // sql.ErrNoRows: ErrNotFound
			}
			return fmt.Errorf("%s: %w: the stored secret changed meanwhile", op, store.ErrConflict)
		}
		for _, k := range keep {
			if _, err := s.exec(ctx, tx, `INSERT INTO deployment_keys (name, secret, created_at) VALUES (?, ?, ?)`,
				k.Name, base64.StdEncoding.EncodeToString(k.Secret), s.d.TimeArg(store.Stamp(k.CreatedAt))); err != nil {
				return s.fail(fmt.Sprintf("%s: keep %q", op, k.Name), err)
			}
		}
		return nil
	})
}
