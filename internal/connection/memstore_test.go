package connection_test

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// memStore stands in for the SQL store until it lands (branch i37-store).
type memStore struct {
	mu      sync.Mutex
	conns   map[string]store.Connection
	states  map[string]store.ConnectionState
	servers map[string]store.MCPServer
}

func newMemStore() *memStore {
	return &memStore{conns: map[string]store.Connection{}, states: map[string]store.ConnectionState{}, servers: map[string]store.MCPServer{}}
}

func (m *memStore) PutConnection(_ context.Context, c store.Connection) error {
	if err := c.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, o := range m.conns {
		if o.Org == c.Org && o.ProviderID == c.ProviderID && o.OwnerKind == c.OwnerKind && o.OwnerRef == c.OwnerRef {
			delete(m.conns, id)
		}
	}
	m.conns[c.ID] = c
	return nil
}

func (m *memStore) GetConnection(_ context.Context, org, providerID, kind, ref string) (store.Connection, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range m.conns {
		if o.Org == org && o.ProviderID == providerID && o.OwnerKind == kind && o.OwnerRef == ref {
			return o, nil
		}
	}
	return store.Connection{}, store.ErrNotFound
}

func (m *memStore) GetConnectionByID(_ context.Context, org, id string) (store.Connection, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.conns[id]
	if !ok || c.Org != org {
		return store.Connection{}, store.ErrNotFound
	}
	return c, nil
}

func (m *memStore) ListConnections(_ context.Context, org string) ([]store.Connection, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Connection
	for _, c := range m.conns {
		if c.Org == org {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b store.Connection) int {
		if a.ProviderID+a.OwnerKind+a.OwnerRef < b.ProviderID+b.OwnerKind+b.OwnerRef {
			return -1
		}
		return 1
	})
	return out, nil
}

func (m *memStore) UpdateConnection(_ context.Context, c store.Connection) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.conns[c.ID]
	if !ok {
		return store.ErrNotFound
	}
	if o.Version != c.Version-1 {
		return store.ErrConflict
	}
	m.conns[c.ID] = c
	return nil
}

func (m *memStore) DeleteConnection(_ context.Context, org, id string) (store.Connection, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.conns[id]
	if !ok || c.Org != org {
		return store.Connection{}, store.ErrNotFound
	}
	delete(m.conns, id)
	return c, nil
}

func (m *memStore) PutConnectionState(_ context.Context, s store.ConnectionState) error {
	if err := s.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.states[s.State]; ok {
		return store.ErrConflict
	}
	m.states[s.State] = s
	return nil
}

func (m *memStore) TakeConnectionState(_ context.Context, state string, now time.Time) (store.ConnectionState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.states[state]
	if !ok {
		return store.ConnectionState{}, store.ErrNotFound
	}
	delete(m.states, state)
	if !now.Before(s.ExpiresAt) {
		return store.ConnectionState{}, store.ErrNotFound
	}
	return s, nil
}

func (m *memStore) GetMCPServer(_ context.Context, id string) (store.MCPServer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.servers[id]
	if !ok {
		return store.MCPServer{}, store.ErrNotFound
	}
	return s, nil
}

func (m *memStore) putServer(s store.MCPServer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.servers[s.ProviderID] = s
}
