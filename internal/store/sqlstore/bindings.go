package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/xemahq/xema/internal/store"
)

var _ store.BindingStore = (*Store)(nil)

const credentialColumns = `id, org, name, provider, sealed, key_id, created_by, created_at, rotated_at, oauth`

func scanCredential(sc scanner) (store.Credential, error) {
	var c store.Credential
	var oauth string
	err := sc.Scan(&c.ID, &c.Org, &c.Name, &c.Provider, &c.Sealed, &c.KeyID, &c.CreatedBy, timeCol{&c.CreatedAt}, nullTimeCol{&c.RotatedAt}, &oauth)
	if oauth != "" {
		c.OAuth = json.RawMessage(oauth)
	}
	return c, err
}

// PutCredential implements store.BindingStore.
func (s *Store) PutCredential(ctx context.Context, c store.Credential) error {
	op := fmt.Sprintf("put credential %q", c.ID)
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if _, err := s.exec(ctx, s.db, `INSERT INTO credentials (`+credentialColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)`,
		c.ID, c.Org, c.Name, c.Provider, c.Sealed, c.KeyID, c.CreatedBy, s.d.TimeArg(store.Stamp(c.CreatedAt)), string(c.OAuth)); err != nil {
		return s.fail(op, err)
	}
	return nil
}

// GetCredential implements store.BindingStore.
func (s *Store) GetCredential(ctx context.Context, id string) (store.Credential, error) {
	c, err := scanCredential(s.db.QueryRowContext(ctx, s.d.bind(`SELECT `+credentialColumns+` FROM credentials WHERE id = ?`), id))
	if err != nil {
		return store.Credential{}, s.fail(fmt.Sprintf("get credential %q", id), err)
	}
	return c, nil
}

// ListCredentials implements store.BindingStore.
func (s *Store) ListCredentials(ctx context.Context, org string) ([]store.Credential, error) {
	return list(ctx, s, fmt.Sprintf("list credentials of org %q", org), scanCredential,
		`SELECT `+credentialColumns+` FROM credentials WHERE (? = '' OR org = ?) ORDER BY created_at, id`, org, org)
}

// DeleteCredential implements store.BindingStore.
func (s *Store) DeleteCredential(ctx context.Context, id string) error {
	op := fmt.Sprintf("delete credential %q", id)
	return s.inTx(ctx, op, func(tx *sql.Tx) error {
		var used int
		if err := tx.QueryRowContext(ctx, s.d.bind(`SELECT COUNT(*) FROM bindings WHERE credential_id = ?`), id).Scan(&used); err != nil {
			return s.fail(op, err)
		}
		if used > 0 {
			return fmt.Errorf("%s: %w: %d binding(s) use it", op, store.ErrConflict, used)
		}
		// An OAuth credential's connections would be left with tokens nobody can revoke.
		if err := tx.QueryRowContext(ctx, s.d.bind(`SELECT COUNT(*) FROM connections WHERE provider_id = ?`), id).Scan(&used); err != nil {
			return s.fail(op, err)
		}
		if used > 0 {
			return fmt.Errorf("%s: %w: %d connection(s) use it", op, store.ErrConflict, used)
		}
		n, err := s.exec(ctx, tx, `DELETE FROM credentials WHERE id = ?`, id)
		if err != nil {
			return s.fail(op, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: %w", op, store.ErrNotFound)
		}
		return nil
	})
}

// ResealCredentials implements store.BindingStore.
func (s *Store) ResealCredentials(ctx context.Context, at time.Time, reseal func(store.Credential) (string, string, error)) (int, error) {
	const op = "reseal credentials"
	n := 0
	err := s.inTx(ctx, op, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+credentialColumns+` FROM credentials ORDER BY id`)
		if err != nil {
			return s.fail(op, err)
		}
		var creds []store.Credential
		for rows.Next() {
			c, err := scanCredential(rows)
			if err != nil {
				rows.Close()
				return s.fail(op, err)
			}
			creds = append(creds, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return s.fail(op, err)
		}
		for _, c := range creds {
			sealed, kid, err := reseal(c)
			if err != nil {
				return fmt.Errorf("%s: credential %q: %w", op, c.ID, err)
			}
			if _, err := s.exec(ctx, tx, `UPDATE credentials SET sealed = ?, key_id = ?,
				rotated_at = CASE WHEN key_id <> ? THEN ? ELSE rotated_at END WHERE id = ?`,
				sealed, kid, kid, s.d.TimeArg(store.Stamp(at)), c.ID); err != nil {
				return s.fail(op, err)
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

const bindingColumns = `id, org, project, environment, ref_pattern, conversation, provider, base_url, credential_id,
	config, created_by, created_at`

func scanBinding(sc scanner) (store.Binding, error) {
	var b store.Binding
	var config []byte
	err := sc.Scan(&b.ID, &b.Org, &b.Project, &b.Environment, &b.RefPattern, &b.Conversation, &b.Provider, &b.BaseURL,
		&b.CredentialID, &config, &b.CreatedBy, timeCol{&b.CreatedAt})
	b.Config = jsonCol(config)
	return b, err
}

// PutBinding implements store.BindingStore.
func (s *Store) PutBinding(ctx context.Context, b store.Binding, replaces string) error {
	op := fmt.Sprintf("put binding %q", b.ID)
	if err := b.Validate(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return s.inTx(ctx, op, func(tx *sql.Tx) error {
		if replaces != "" {
			n, err := s.exec(ctx, tx, `DELETE FROM bindings WHERE id = ? AND org = ?`, replaces, b.Org)
			if err != nil {
				return s.fail(op, err)
			}
			if n == 0 {
				return fmt.Errorf("%s: replaces %q: %w", op, replaces, store.ErrNotFound)
			}
		}
		if _, err := s.exec(ctx, tx, `INSERT INTO bindings (`+bindingColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			b.ID, b.Org, b.Project, b.Environment, b.RefPattern, b.Conversation, b.Provider, b.BaseURL, b.CredentialID,
			jsonArg(b.Config), b.CreatedBy, s.d.TimeArg(store.Stamp(b.CreatedAt))); err != nil {
			return s.fail(op, err)
		}
		return nil
	})
}

// GetBinding implements store.BindingStore.
func (s *Store) GetBinding(ctx context.Context, id string) (store.Binding, error) {
	b, err := scanBinding(s.db.QueryRowContext(ctx, s.d.bind(`SELECT `+bindingColumns+` FROM bindings WHERE id = ?`), id))
	if err != nil {
		return store.Binding{}, s.fail(fmt.Sprintf("get binding %q", id), err)
	}
	return b, nil
}

// ListBindings implements store.BindingStore.
func (s *Store) ListBindings(ctx context.Context, org string) ([]store.Binding, error) {
	return list(ctx, s, fmt.Sprintf("list bindings of org %q", org), scanBinding,
		`SELECT `+bindingColumns+` FROM bindings WHERE (? = '' OR org = ?) ORDER BY created_at, id`, org, org)
}

// DeleteBinding implements store.BindingStore.
func (s *Store) DeleteBinding(ctx context.Context, id string) error {
	op := fmt.Sprintf("delete binding %q", id)
	n, err := s.exec(ctx, s.db, `DELETE FROM bindings WHERE id = ?`, id)
	if err != nil {
		return s.fail(op, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	return nil
}
