package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/xemahq/xema/internal/store"
)

// SaveMCPServer implements store.FederationStore.
func (s *Store) SaveMCPServer(ctx context.Context, srv store.MCPServer, bv store.BiomeVersion, caps []store.Capability, events []store.LifecycleEvent) error {
	op := fmt.Sprintf("save mcp server %q generation %d", srv.ProviderID, srv.Generation)
	if err := srv.Validate(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := bv.Validate(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	caps, err := ownCapabilities(bv, caps)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	for i := range events {
		if err := events[i].Validate(); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		events[i].At = store.Stamp(events[i].At)
	}
	args, err := json.Marshal(nonNilArgs(srv.Args))
	if err != nil {
		return fmt.Errorf("%s: encode args: %w", op, err)
	}
	tools, err := json.Marshal(nonNilTools(srv.Tools))
	if err != nil {
		return fmt.Errorf("%s: encode tools: %w", op, err)
	}
	bv.CreatedAt = store.Stamp(bv.CreatedAt)
	srv.RegisteredAt, srv.SyncedAt = store.Stamp(srv.RegisteredAt), store.Stamp(srv.SyncedAt)
	return s.inTx(ctx, op, func(tx *sql.Tx) error {
		// Transitions first: a changed tool is never published under its new definition.
		for _, ev := range events {
			if err := s.transitionTx(ctx, tx, op, ev); err != nil {
				return err
			}
		}
		if _, err := s.publishTx(ctx, tx, op, bv, caps); err != nil {
			return err
		}
		if err := s.putMCPServer(ctx, tx, op, srv, args, tools); err != nil {
			return err
		}
		return s.bumpRevision(ctx, tx, op)
	})
}

func (s *Store) putMCPServer(ctx context.Context, tx *sql.Tx, op string, srv store.MCPServer, args, tools []byte) error {
	if srv.Generation == 1 {
		_, err := s.exec(ctx, tx, `INSERT INTO mcp_servers
			(provider_id, transport, url, command, args, auth, oauth, timeout_ms, tools, generation, registered_by, registered_at, synced_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			srv.ProviderID, srv.Transport, srv.URL, srv.Command, string(args), srv.Auth, string(srv.OAuth), srv.TimeoutMs, string(tools),
			srv.Generation, srv.RegisteredBy, s.d.TimeArg(srv.RegisteredAt), s.d.TimeArg(srv.SyncedAt))
		if err != nil {
			return s.fail(op, err)
		}
		return nil
	}
	// oauth is not written here: a sync carries the document it read, and a key rotation
	// (ResealMCPServerOAuth, which keeps the generation) may have resealed it meanwhile.
	n, err := s.exec(ctx, tx, `UPDATE mcp_servers SET transport = ?, url = ?, command = ?, args = ?, auth = ?,
		timeout_ms = ?, tools = ?, generation = ?, synced_at = ? WHERE provider_id = ? AND generation = ?`,
		srv.Transport, srv.URL, srv.Command, string(args), srv.Auth, srv.TimeoutMs, string(tools), srv.Generation,
		s.d.TimeArg(srv.SyncedAt), srv.ProviderID, srv.Generation-1)
	if err != nil {
		return s.fail(op, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w: the stored server is not at generation %d", op, store.ErrConflict, srv.Generation-1)
	}
	return nil
}

func nonNilArgs(a []string) []string {
	if a == nil {
		return []string{}
	}
	return a
}

func nonNilTools(t []store.MCPTool) []store.MCPTool {
	if t == nil {
		return []store.MCPTool{}
	}
	return t
}

// The oauth column holds the document as given, the empty string for none (read back as nil).
const mcpServerColumns = `provider_id, transport, url, command, args, auth, oauth, timeout_ms, tools, generation,
	registered_by, registered_at, synced_at`

func scanMCPServer(sc scanner) (store.MCPServer, error) {
	var srv store.MCPServer
	var args, oauth, tools []byte
	if err := sc.Scan(&srv.ProviderID, &srv.Transport, &srv.URL, &srv.Command, &args, &srv.Auth, &oauth, &srv.TimeoutMs,
		&tools, &srv.Generation, &srv.RegisteredBy, timeCol{&srv.RegisteredAt}, timeCol{&srv.SyncedAt}); err != nil {
		return srv, err
	}
	srv.OAuth = jsonCol(oauth)
	if err := json.Unmarshal(args, &srv.Args); err != nil {
		return srv, fmt.Errorf("stored args: %w", err)
	}
	if err := json.Unmarshal(tools, &srv.Tools); err != nil {
		return srv, fmt.Errorf("stored tools: %w", err)
	}
	return srv, nil
}

// GetMCPServer implements store.FederationStore.
func (s *Store) GetMCPServer(ctx context.Context, providerID string) (store.MCPServer, error) {
	srv, err := scanMCPServer(s.db.QueryRowContext(ctx, s.d.bind(`SELECT `+mcpServerColumns+` FROM mcp_servers WHERE provider_id = ?`), providerID))
	if err != nil {
		return store.MCPServer{}, s.fail(fmt.Sprintf("get mcp server %q", providerID), err)
	}
	return srv, nil
}

// ListMCPServers implements store.FederationStore.
func (s *Store) ListMCPServers(ctx context.Context) ([]store.MCPServer, error) {
	return list(ctx, s, "list mcp servers", scanMCPServer, `SELECT `+mcpServerColumns+` FROM mcp_servers ORDER BY provider_id`)
}

// ResealMCPServerOAuth implements store.FederationStore. Each document is rewritten only at
// the generation it was read at: a sync committed meanwhile fails the whole reseal
// (ErrConflict, nothing changed; run it again) rather than be overwritten.
func (s *Store) ResealMCPServerOAuth(ctx context.Context, reseal func(store.MCPServer) (json.RawMessage, error)) (int, error) {
	const op = "reseal mcp servers' oauth"
	n := 0
	err := s.inTx(ctx, op, func(tx *sql.Tx) error {
		srvs, err := listOn(ctx, s, tx, op, scanMCPServer, `SELECT `+mcpServerColumns+` FROM mcp_servers ORDER BY provider_id`)
		if err != nil {
			return err
		}
		for _, srv := range srvs {
			if len(srv.OAuth) == 0 {
				continue
			}
			doc, err := reseal(srv)
			if err != nil {
				return fmt.Errorf("%s: mcp server %q: %w", op, srv.ProviderID, err)
			}
			if doc == nil {
				continue
			}
			if !json.Valid(doc) {
				return fmt.Errorf("%s: mcp server %q: %w: the resealed OAuth document is not valid JSON", op, srv.ProviderID, store.ErrInvalid)
			}
			m, err := s.exec(ctx, tx, `UPDATE mcp_servers SET oauth = ? WHERE provider_id = ? AND generation = ?`,
				string(doc), srv.ProviderID, srv.Generation)
			if err != nil {
				return s.fail(op, err)
			}
			if m == 0 {
				return fmt.Errorf("%s: mcp server %q: %w: changed while resealing", op, srv.ProviderID, store.ErrConflict)
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
