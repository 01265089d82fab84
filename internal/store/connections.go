package store

import (
	"context"
	"time"
)

// Owners of a connection: the org's one account, or a person's own.
const (
	OwnerOrg  = "org"
	OwnerUser = "user"
)

// Statuses of a connection.
const (
	ConnectionConnected      = "connected"
	ConnectionNeedsReconnect = "needs-reconnect"
)

// Connection is an account connected to an OAuth-protected provider (an MCP server
// registered with auth kind oauth): the tokens the gateway holds for an org or a person, only
// ever sealed (internal/secretbox). There is at most one per (Org, ProviderID, OwnerKind,
// OwnerRef).
type Connection struct {
	ID         string
	Org        string
	ProviderID string
	OwnerKind  string // OwnerOrg | OwnerUser
	OwnerRef   string // the person's subject ref for OwnerUser; "" for OwnerOrg
	Status     string // ConnectionConnected | ConnectionNeedsReconnect
	Scopes     []string
	// AccessSealed and RefreshSealed are sealed under KeyID; RefreshSealed is "" when the
	// authorization server issued no refresh token.
	AccessSealed  string
	RefreshSealed string
	KeyID         string
	ExpiresAt     time.Time // zero: the authorization server declared no expiry
	// Version is 1 when connected and grows by one with every update (a refresh, a status
	// change): updates compare and set on it, so two replicas refreshing one token cannot
	// both store a rotated refresh token.
	Version     int64
	CreatedBy   string
	CreatedAt   time.Time
	RefreshedAt time.Time // zero: never refreshed
}

// ConnectionState is one authorization request under way: created when a person starts
// connecting, taken (once) by the callback. State is the hash of the value sent as the
// request's state parameter; the PKCE verifier is sealed.
type ConnectionState struct {
	State          string
	Org            string
	ProviderID     string
	OwnerKind      string
	OwnerRef       string
	CreatedBy      string
	VerifierSealed string
	KeyID          string
	CreatedAt      time.Time
	ExpiresAt      time.Time
}

// ConnectionStore keeps the connections and the authorization requests under way.
type ConnectionStore interface {
	// PutConnection stores c (Version 1) in place of any connection of the same org,
	// provider and owner (a reconnect), in one statement or transaction.
	PutConnection(ctx context.Context, c Connection) error
	// GetConnection returns the connection of (org, provider, ownerKind, ownerRef):
	// ErrNotFound when none.
	GetConnection(ctx context.Context, org, providerID, ownerKind, ownerRef string) (Connection, error)
	// GetConnectionByID returns org's connection id: ErrNotFound when unknown or another org's.
	GetConnectionByID(ctx context.Context, org, id string) (Connection, error)
	// ListConnections returns org's connections, ordered by provider, owner kind, owner ref.
	ListConnections(ctx context.Context, org string) ([]Connection, error)
	// UpdateConnection stores c (tokens, status, scopes, expiry, refreshed-at) while the
	// stored connection of c.ID is at c.Version-1: ErrConflict otherwise (another update won),
	// ErrNotFound when it is gone.
	UpdateConnection(ctx context.Context, c Connection) error
	// DeleteConnection removes org's connection id and returns it: ErrNotFound when unknown
	// or another org's.
	DeleteConnection(ctx context.Context, org, id string) (Connection, error)
	// ResealConnections replaces every connection's sealed tokens with reseal's result in
	// one transaction (key rotation): all or none.
	ResealConnections(ctx context.Context, reseal func(Connection) (access, refresh, keyID string, err error)) (int, error)

	// PutConnectionState stores an authorization request: a stored State is ErrConflict.
	PutConnectionState(ctx context.Context, s ConnectionState) error
	// TakeConnectionState deletes the request with State state and returns it, once:
	// ErrNotFound when unknown, already taken, or expired at now (an expired one is deleted too).
	TakeConnectionState(ctx context.Context, state string, now time.Time) (ConnectionState, error)
	// PruneConnectionStates deletes the requests that expired before now.
	PruneConnectionStates(ctx context.Context, now time.Time) (int64, error)
}

// Validate checks the fields the store itself requires.
func (c Connection) Validate() error {
	what := "connection " + c.ID
	if err := required(what, field{"ID", c.ID}, field{"Org", c.Org}, field{"ProviderID", c.ProviderID},
		field{"AccessSealed", c.AccessSealed}, field{"KeyID", c.KeyID}); err != nil {
		return err
	}
	switch {
	case c.OwnerKind != OwnerOrg && c.OwnerKind != OwnerUser:
		return invalid(what, "OwnerKind", "must be org or user")
	case c.OwnerKind == OwnerOrg && c.OwnerRef != "":
		return invalid(what, "OwnerRef", "must be empty for an org connection")
	case c.OwnerKind == OwnerUser && c.OwnerRef == "":
		return invalid(what, "OwnerRef", "must name the person of a user connection")
	case c.Status != ConnectionConnected && c.Status != ConnectionNeedsReconnect:
		return invalid(what, "Status", "must be connected or needs-reconnect")
	case c.Version < 1:
		return invalid(what, "Version", "must be >= 1")
	}
	return nil
}

// Validate checks the fields the store itself requires.
func (s ConnectionState) Validate() error {
	what := "connection state"
	if err := required(what, field{"State", s.State}, field{"Org", s.Org}, field{"ProviderID", s.ProviderID},
		field{"VerifierSealed", s.VerifierSealed}, field{"KeyID", s.KeyID}); err != nil {
		return err
	}
	switch {
	case s.OwnerKind != OwnerOrg && s.OwnerKind != OwnerUser:
		return invalid(what, "OwnerKind", "must be org or user")
	case s.OwnerKind == OwnerOrg && s.OwnerRef != "":
		return invalid(what, "OwnerRef", "must be empty for an org connection")
	case s.OwnerKind == OwnerUser && s.OwnerRef == "":
		return invalid(what, "OwnerRef", "must name the person of a user connection")
	case s.ExpiresAt.IsZero():
		return invalid(what, "ExpiresAt", "is required")
	}
	return nil
}
