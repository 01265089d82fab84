package sqlstore

import (
	"context"
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
