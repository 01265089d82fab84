package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/xemahq/xema/internal/store"
)

var _ store.ConnectionStore = (*Store)(nil)

const connectionColumns = `id, org, provider_id, owner_kind, owner_ref, status, scopes, access_sealed, refresh_sealed,
	key_id, expires_at, version, created_by, created_at, refreshed_at`

func scanConnection(sc scanner) (store.Connection, error) {
	var c store.Connection
	var scopes []byte
	if err := sc.Scan(&c.ID, &c.Org, &c.ProviderID, &c.OwnerKind, &c.OwnerRef, &c.Status, &scopes, &c.AccessSealed,
		&c.RefreshSealed, &c.KeyID, nullTimeCol{&c.ExpiresAt}, &c.Version, &c.CreatedBy, timeCol{&c.CreatedAt},
		nullTimeCol{&c.RefreshedAt}); err != nil {
		return c, err
	}
	if err := json.Unmarshal(scopes, &c.Scopes); err != nil {
		return c, fmt.Errorf("stored scopes: %w", err)
	}
	if len(c.Scopes) == 0 {
		c.Scopes = nil // no scopes read back as nil, however they were given
	}
	return c, nil
}

// nullTimeArg is a time as the argument of a nullable time column: NULL for the zero time.
func (s *Store) nullTimeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return s.d.TimeArg(store.Stamp(t))
}

func scopesArg(scopes []string) (string, error) {
	if scopes == nil {
		scopes = []string{}
	}
	b, err := json.Marshal(scopes)
	return string(b), err
}

// PutConnection implements store.ConnectionStore: one upsert on the owner's unique key, so a
// reconnect replaces the stored connection (its id too) and two concurrent ones both succeed,
// the last one's row standing.
func (s *Store) PutConnection(ctx context.Context, c store.Connection) error {
	op := fmt.Sprintf("put connection %q", c.ID)
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	scopes, err := scopesArg(c.Scopes)
	if err != nil {
		return fmt.Errorf("%s: encode scopes: %w", op, err)
	}
	if _, err := s.exec(ctx, s.db, `INSERT INTO connections (`+connectionColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (org, provider_id, owner_kind, owner_ref) DO UPDATE SET id = excluded.id, status = excluded.status,
			scopes = excluded.scopes, access_sealed = excluded.access_sealed, refresh_sealed = excluded.refresh_sealed,
			key_id = excluded.key_id, expires_at = excluded.expires_at, version = excluded.version,
			created_by = excluded.created_by, created_at = excluded.created_at, refreshed_at = excluded.refreshed_at`,
		c.ID, c.Org, c.ProviderID, c.OwnerKind, c.OwnerRef, c.Status, scopes, c.AccessSealed, c.RefreshSealed, c.KeyID,
		s.nullTimeArg(c.ExpiresAt), c.Version, c.CreatedBy, s.d.TimeArg(store.Stamp(c.CreatedAt)),
		s.nullTimeArg(c.RefreshedAt)); err != nil {
		return s.fail(op, err)
	}
	return nil
}

// GetConnection implements store.ConnectionStore: a read on every call through a connection,
// so its statement is prepared once (callRow).
func (s *Store) GetConnection(ctx context.Context, org, providerID, ownerKind, ownerRef string) (store.Connection, error) {
	c, err := scanConnection(s.callRow(ctx, `SELECT `+connectionColumns+` FROM connections
		WHERE org = ? AND provider_id = ? AND owner_kind = ? AND owner_ref = ?`, org, providerID, ownerKind, ownerRef))
	if err != nil {
		return store.Connection{}, s.fail(fmt.Sprintf("get %s connection %q to %q of org %q", ownerKind, ownerRef, providerID, org), err)
	}
	return c, nil
}

// GetConnectionByID implements store.ConnectionStore.
func (s *Store) GetConnectionByID(ctx context.Context, org, id string) (store.Connection, error) {
	c, err := scanConnection(s.db.QueryRowContext(ctx, s.d.bind(`SELECT `+connectionColumns+` FROM connections
		WHERE id = ? AND org = ?`), id, org))
	if err != nil {
		return store.Connection{}, s.fail(fmt.Sprintf("get connection %q of org %q", id, org), err)
	}
	return c, nil
}

// ListConnections implements store.ConnectionStore.
func (s *Store) ListConnections(ctx context.Context, org string) ([]store.Connection, error) {
	return list(ctx, s, fmt.Sprintf("list connections of org %q", org), scanConnection,
		`SELECT `+connectionColumns+` FROM connections WHERE org = ? ORDER BY provider_id, owner_kind, owner_ref`, org)
}

// UpdateConnection implements store.ConnectionStore: a compare-and-set on the version.
func (s *Store) UpdateConnection(ctx context.Context, c store.Connection) error {
	op := fmt.Sprintf("update connection %q to version %d", c.ID, c.Version)
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if c.Version < 2 {
		return fmt.Errorf("%s: %w: an update's Version must be >= 2 (the stored one's + 1)", op, store.ErrInvalid)
	}
	scopes, err := scopesArg(c.Scopes)
	if err != nil {
		return fmt.Errorf("%s: encode scopes: %w", op, err)
	}
	n, err := s.exec(ctx, s.db, `UPDATE connections SET status = ?, scopes = ?, access_sealed = ?, refresh_sealed = ?,
		key_id = ?, expires_at = ?, refreshed_at = ?, version = ? WHERE id = ? AND org = ? AND version = ?`,
		c.Status, scopes, c.AccessSealed, c.RefreshSealed, c.KeyID, s.nullTimeArg(c.ExpiresAt), s.nullTimeArg(c.RefreshedAt),
		c.Version, c.ID, c.Org, c.Version-1)
	if err != nil {
		return s.fail(op, err)
	}
	if n == 1 {
		return nil
	}
	var stored int64
	if err := s.db.QueryRowContext(ctx, s.d.bind(`SELECT version FROM connections WHERE id = ? AND org = ?`), c.ID, c.Org).Scan(&stored); err != nil {
		return s.fail(op, err)
	}
	return fmt.Errorf("%s: %w: the stored connection is at version %d", op, store.ErrConflict, stored)
}

// DeleteConnection implements store.ConnectionStore: one DELETE ... RETURNING.
func (s *Store) DeleteConnection(ctx context.Context, org, id string) (store.Connection, error) {
	c, err := scanConnection(s.db.QueryRowContext(ctx, s.d.bind(`DELETE FROM connections WHERE id = ? AND org = ?
		RETURNING `+connectionColumns), id, org))
	if err != nil {
		return store.Connection{}, s.fail(fmt.Sprintf("delete connection %q of org %q", id, org), err)
	}
	return c, nil
}

// ResealConnections implements store.ConnectionStore. Each row is rewritten only at the
// version it was read at: a refresh committed by another replica meanwhile fails the whole
// reseal (ErrConflict, nothing changed; run it again) rather than be overwritten. A reseal
// leaves the version as it is, so a refresh under way still stores its rotated tokens.
func (s *Store) ResealConnections(ctx context.Context, reseal func(store.Connection) (access, refresh, keyID string, err error)) (int, error) {
	const op = "reseal connections"
	n := 0
	err := s.inTx(ctx, op, func(tx *sql.Tx) error {
		conns, err := listOn(ctx, s, tx, op, scanConnection, `SELECT `+connectionColumns+` FROM connections ORDER BY id`)
		if err != nil {
			return err
		}
		for _, c := range conns {
			access, refresh, kid, err := reseal(c)
			if err != nil {
				return fmt.Errorf("%s: connection %q: %w", op, c.ID, err)
			}
			if access == "" || kid == "" {
				return fmt.Errorf("%s: connection %q: %w: the resealed access token and key id are required", op, c.ID, store.ErrInvalid)
			}
			m, err := s.exec(ctx, tx, `UPDATE connections SET access_sealed = ?, refresh_sealed = ?, key_id = ?
				WHERE id = ? AND version = ?`, access, refresh, kid, c.ID, c.Version)
			if err != nil {
				return s.fail(op, err)
			}
			if m == 0 {
				return fmt.Errorf("%s: connection %q: %w: changed while resealing", op, c.ID, store.ErrConflict)
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

const connectionStateColumns = `state, org, provider_id, owner_kind, owner_ref, created_by, verifier_sealed, key_id,
	created_at, expires_at`

func scanConnectionState(sc scanner) (store.ConnectionState, error) {
	var st store.ConnectionState
	err := sc.Scan(&st.State, &st.Org, &st.ProviderID, &st.OwnerKind, &st.OwnerRef, &st.CreatedBy, &st.VerifierSealed,
		&st.KeyID, timeCol{&st.CreatedAt}, timeCol{&st.ExpiresAt})
	return st, err
}

// PutConnectionState implements store.ConnectionStore.
func (s *Store) PutConnectionState(ctx context.Context, st store.ConnectionState) error {
	const op = "put connection state"
	if err := st.Validate(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if _, err := s.exec(ctx, s.db, `INSERT INTO connection_states (`+connectionStateColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		st.State, st.Org, st.ProviderID, st.OwnerKind, st.OwnerRef, st.CreatedBy, st.VerifierSealed, st.KeyID,
		s.d.TimeArg(store.Stamp(st.CreatedAt)), s.d.TimeArg(store.Stamp(st.ExpiresAt))); err != nil {
		return s.fail(op, err)
	}
	return nil
}

// TakeConnectionState implements store.ConnectionStore: one DELETE ... RETURNING, so of two
// concurrent takers one gets the request and the other ErrNotFound.
func (s *Store) TakeConnectionState(ctx context.Context, state string, now time.Time) (store.ConnectionState, error) {
	const op = "take connection state"
	st, err := scanConnectionState(s.db.QueryRowContext(ctx, s.d.bind(`DELETE FROM connection_states WHERE state = ?
		RETURNING `+connectionStateColumns), state))
	if err != nil {
		return store.ConnectionState{}, s.fail(op, err)
	}
	if !st.ExpiresAt.After(store.Stamp(now)) {
		return store.ConnectionState{}, fmt.Errorf("%s: %w: expired at %s", op, store.ErrNotFound, st.ExpiresAt.Format(time.RFC3339))
	}
	return st, nil
}

// PruneConnectionStates implements store.ConnectionStore: it deletes the requests expired at
// now (expires_at <= now), those TakeConnectionState would refuse.
func (s *Store) PruneConnectionStates(ctx context.Context, now time.Time) (int64, error) {
	n, err := s.exec(ctx, s.db, `DELETE FROM connection_states WHERE expires_at <= ?`, s.d.TimeArg(store.Stamp(now)))
	if err != nil {
		return 0, s.fail("prune connection states", err)
	}
	return n, nil
}
