package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// MCPServer is a registered external MCP server (spec: "External MCP servers as capability
// providers"): how to reach it and the pinned definition of every tool it was seeded with.
// Its provider id is also the id of the biome its tools are published under.
type MCPServer struct {
	ProviderID string
	Transport  string // streamable-http | stdio
	URL        string
	Command    string
	Args       []string
	Auth       string // "", service-token or oauth
	// OAuth is, for auth oauth, the server's authorization server and the gateway's client
	// there, as internal/connection encodes it (a client secret only ever sealed); nil otherwise.
	// It is stored at registration (Generation 1) and changed only by ResealMCPServerOAuth:
	// a later generation's save leaves it as stored.
	OAuth     json.RawMessage
	TimeoutMs int
	Tools     []MCPTool
	// Generation is 1 at registration and grows by one with each sync that stored a change;
	// the biome version of the server's tools is derived from it.
	Generation int64
	// Org is the org that registered the server; kept as the owner of its biome id (not a
	// column of its own).
	Org          string
	RegisteredBy string
	RegisteredAt time.Time
	SyncedAt     time.Time
}

// MCPTool is one pinned tool: its capability ref, its name on the server (for tools/call)
// and the hash of its definition.
type MCPTool struct {
	Ref  string `json:"ref"`
	Name string `json:"name"`
	Pin  string `json:"pin"`
}

// FederationStore holds the registered external MCP servers.
type FederationStore interface {
	// SaveMCPServer applies events (lifecycle transitions, compare-and-set like
	// TransitionLifecycle), publishes bv with caps (like PublishBiome) and stores srv, all in
	// one transaction. Generation 1 inserts srv (ErrConflict when the provider id is
	// registered); Generation N updates the record only while it is at N-1 (ErrConflict
	// otherwise, e.g. a concurrent sync).
	SaveMCPServer(ctx context.Context, srv MCPServer, bv BiomeVersion, caps []Capability, events []LifecycleEvent) error
	GetMCPServer(ctx context.Context, providerID string) (MCPServer, error)
	// ListMCPServers returns every registered server ordered by provider id.
	ListMCPServers(ctx context.Context) ([]MCPServer, error)
	// ResealMCPServerOAuth passes every server with an OAuth document to reseal (key
	// rotation: the document holds a client secret sealed with the credential keyring) and
	// stores the document it returns in place of the old one, in one transaction: all or
	// none. A nil document leaves that server as it is. A server changed meanwhile (a sync)
	// fails the whole reseal with ErrConflict; the generation is kept. It returns how many
	// documents it replaced.
	ResealMCPServerOAuth(ctx context.Context, reseal func(MCPServer) (json.RawMessage, error)) (int, error)
}

// Validate checks what the store itself requires of a server record.
func (s MCPServer) Validate() error {
	what := "mcp server " + s.ProviderID
	if err := required(what, field{"ProviderID", s.ProviderID}, field{"Transport", s.Transport}); err != nil {
		return err
	}
	switch {
	case s.Transport != "streamable-http" && s.Transport != "stdio":
		return invalid(what, "Transport", "must be streamable-http or stdio")
	case s.TimeoutMs <= 0:
		return invalid(what, "TimeoutMs", "must be > 0")
	case s.Generation < 1:
		return invalid(what, "Generation", "must be >= 1")
	}
	if err := jsonDocs(what, false, doc{"OAuth", s.OAuth}); err != nil {
		return err
	}
	for i, t := range s.Tools {
		if t.Ref == "" || t.Name == "" || t.Pin == "" {
			return invalid(what, fmt.Sprintf("Tools[%d]", i), "needs Ref, Name and Pin")
		}
	}
	return nil
}
