// Package connection connects orgs and persons to OAuth-protected MCP servers (the MCP
// authorization spec): it discovers a server's authorization server (RFC 9728, RFC 8414,
// OpenID discovery), registers the gateway as a client there (RFC 7591) unless given one,
// runs the authorization-code flow with PKCE S256 and an RFC 8707 resource indicator, and
// holds the tokens it gets, sealed, per org ("org connection") or per person ("user
// connection"): refreshed when about to expire, revoked at disconnect (RFC 7009). An agent
// never receives a token: Token is for the runner calling the server.
package connection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/inputschema"
	"github.com/xemahq/xema/internal/secretbox"
	"github.com/xemahq/xema/internal/store"
)

// Error codes of connections.
const (
	// CodeRequired: the owner has no connection to the provider.
	CodeRequired = "CONNECTION_REQUIRED"
	// CodeExpired: the connection needs a reconnect (its refresh was refused, or it expired
	// with no refresh token).
	CodeExpired = "CONNECTION_EXPIRED"
	// CodeNotFound: no connection by that id in the org.
	CodeNotFound = "CONNECTION_NOT_FOUND"
	// CodeUnknownProvider: no MCP server of the org by that provider id with auth oauth.
	CodeUnknownProvider = "CONNECTION_PROVIDER_NOT_FOUND"
	// CodeInvalidOAuthServer: discovery or client registration failed.
	CodeInvalidOAuthServer = "INVALID_OAUTH_SERVER"
	// CodeInvalidState: the callback's state is unknown, used, expired or another's.
	CodeInvalidState = "INVALID_CONNECTION_STATE"
	// CodeAuthorizationFailed: the authorization server refused the authorization or the
	// code exchange.
	CodeAuthorizationFailed = "AUTHORIZATION_FAILED"
	// CodeTokenUnavailable: the authorization server could not be reached (or the keyring
	// opened) to get a token usable now: transient, the connection is unchanged.
	CodeTokenUnavailable = "CONNECTION_TOKEN_UNAVAILABLE"
	// CodeOrgAdminOnly: an org connection is made and removed by an org administrator.
	CodeOrgAdminOnly = "ORG_ADMIN_ONLY"
	// CodePersonOnly: connections are a person's to make, as themselves.
	CodePersonOnly = "PERSON_ONLY"
)

// Statuses of an owner's connection, as the policy reads them.
const (
	StatusConnected      = store.ConnectionConnected
	StatusNeedsReconnect = store.ConnectionNeedsReconnect
	StatusMissing        = "missing"
)

// CallbackPath is the gateway's redirect URI below its public URL.
const CallbackPath = "/v1/connections/callback"

// Store is what the service needs of the store: the connections, the authorization
// requests under way, and the registered MCP servers (whose OAuth field holds a Server).
type Store interface {
	PutConnection(ctx context.Context, c store.Connection) error
	GetConnection(ctx context.Context, org, providerID, ownerKind, ownerRef string) (store.Connection, error)
	GetConnectionByID(ctx context.Context, org, id string) (store.Connection, error)
	ListConnections(ctx context.Context, org string) ([]store.Connection, error)
	UpdateConnection(ctx context.Context, c store.Connection) error
	DeleteConnection(ctx context.Context, org, id string) (store.Connection, error)
	PutConnectionState(ctx context.Context, s store.ConnectionState) error
	TakeConnectionState(ctx context.Context, state string, now time.Time) (store.ConnectionState, error)
	GetMCPServer(ctx context.Context, providerID string) (store.MCPServer, error)
	ListMCPServers(ctx context.Context) ([]store.MCPServer, error)
	GetCredential(ctx context.Context, id string) (store.Credential, error)
	ListCredentials(ctx context.Context, org string) ([]store.Credential, error)
	// BiomeOwners maps biome ids to their orgs: a server's org is the owner of the biome its
	// provider id names.
	BiomeOwners(ctx context.Context) (map[string]string, error)
}

// Owner is whose account a connection is: the org's (Kind store.OwnerOrg, Ref "") or a
// person's (Kind store.OwnerUser, Ref their subject ref).
type Owner struct {
	Kind string `json:"kind"`
	Ref  string `json:"ref,omitempty"`
}

func (o Owner) validate() error {
	switch {
	case o.Kind == store.OwnerOrg && o.Ref == "":
		return nil
	case o.Kind == store.OwnerOrg:
		return invalidArg("/owner/ref", "must be empty for an org connection")
	case o.Kind == store.OwnerUser && o.Ref == "":
		return invalidArg("/owner/ref", "must name the person of a user connection")
	case o.Kind == store.OwnerUser:
		return nil
	}
	return invalidArg("/owner/kind", "must be org or user")
}

// Auth is a registration's auth object of kind oauth.
type Auth struct {
	// Owner is whose connections the server takes: store.OwnerOrg or store.OwnerUser.
	Owner    string
	ClientID string
	// ClientSecret is resolved by the caller from the registration's clientSecretRef; "" for
	// a public client.
	ClientSecret string
	Scopes       []string
}

// Server is what Discover found: the server's authorization server and the gateway's client
// there. The caller stores it JSON-encoded in store.MCPServer.OAuth; a client secret is only
// ever in it sealed.
type Server struct {
	Owner                 string   `json:"owner"`
	Resource              string   `json:"resource"`
	Issuer                string   `json:"issuer"`
	AuthorizationEndpoint string   `json:"authorizationEndpoint"`
	TokenEndpoint         string   `json:"tokenEndpoint"`
	RevocationEndpoint    string   `json:"revocationEndpoint,omitempty"`
	RegistrationEndpoint  string   `json:"registrationEndpoint,omitempty"`
	ClientID              string   `json:"clientId"`
	ClientSecretSealed    string   `json:"clientSecretSealed,omitempty"`
	KeyID                 string   `json:"keyId,omitempty"`
	Registered            bool     `json:"registered"`
	Scopes                []string `json:"scopes,omitempty"`
	// TokenAuthMethod is how the client authenticates at the token and revocation
	// endpoints: none, client_secret_basic or client_secret_post.
	TokenAuthMethod string `json:"tokenAuthMethod"`
	// credential is set for an OAuth credential's client: its sealed secret is the client
	// secret (never encoded).
	credential *store.Credential
}

// Started is an authorization request under way: the URL to send the person to.
type Started struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// View is a connection as shown: never a token.
type View struct {
	ID          string   `json:"id"`
	ProviderID  string   `json:"providerId"`
	Owner       Owner    `json:"owner"`
	Status      string   `json:"status"`
	Scopes      []string `json:"scopes"`
	ExpiresAt   string   `json:"expiresAt,omitempty"`
	CreatedBy   string   `json:"createdBy"`
	CreatedAt   string   `json:"createdAt"`
	RefreshedAt string   `json:"refreshedAt,omitempty"`
	// Revoked is set by Disconnect only: whether the authorization server confirmed the
	// revocation of the tokens (false: it has none, or refused, or could not be reached).
	Revoked *bool `json:"revoked,omitempty"`
}

func viewOf(c store.Connection) View {
	v := View{ID: c.ID, ProviderID: c.ProviderID, Owner: Owner{Kind: c.OwnerKind, Ref: c.OwnerRef}, Status: c.Status,
		Scopes: c.Scopes, CreatedBy: c.CreatedBy, CreatedAt: stamp(c.CreatedAt), RefreshedAt: stamp(c.RefreshedAt),
		ExpiresAt: stamp(c.ExpiresAt)}
	if v.Scopes == nil {
		v.Scopes = []string{}
	}
	return v
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// Config configures a Service.
type Config struct {
	Store Store
	// Keyring is the current credential keyring (credential.Keys.Current): tokens, PKCE
	// verifiers and client secrets are sealed with it.
	Keyring func() (*secretbox.Keyring, error)
	// HTTP makes every outbound request (discovery, registration, token, revocation): the
	// caller's client dialing through the egress policy, following no redirect.
	HTTP *http.Client
	// PublicURL is the gateway's public base URL: the redirect URI is PublicURL +
	// CallbackPath.
	PublicURL string
	// StateTTL bounds an authorization request (default 10m).
	StateTTL time.Duration
	// RefreshSkew: a token expiring within it is refreshed before use (default 60s).
	RefreshSkew time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Service connects, holds and hands out (to the runner only) connections' tokens.
type Service struct {
	store       Store
	keyring     func() (*secretbox.Keyring, error)
	http        *http.Client
	redirectURI string
	stateTTL    time.Duration
	skew        time.Duration
	now         func() time.Time
	refreshes   singleflight.Group
}

// requestTimeout bounds one request to an authorization server when the client given sets none.
const requestTimeout = 15 * time.Second

// New checks cfg and builds the service.
func New(cfg Config) (*Service, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("connection: no store")
	case cfg.Keyring == nil:
		return nil, errors.New("connection: no keyring")
	case cfg.HTTP == nil:
		return nil, errors.New("connection: no HTTP client")
	case cfg.PublicURL == "":
		return nil, errors.New("connection: no public URL (the redirect URI is derived from it)")
	}
	// A redirect would re-send a refresh token or a client secret wherever it points: none
	// is followed, whatever client is given, and none waits forever.
	hc := *cfg.HTTP
	hc.CheckRedirect = egress.NoRedirect
	if hc.Timeout == 0 {
		hc.Timeout = requestTimeout
	}
	s := &Service{store: cfg.Store, keyring: cfg.Keyring, http: &hc,
		redirectURI: strings.TrimSuffix(cfg.PublicURL, "/") + CallbackPath,
		stateTTL:    cfg.StateTTL, skew: cfg.RefreshSkew, now: cfg.Now}
	if s.stateTTL <= 0 {
		s.stateTTL = 10 * time.Minute
	}
	if s.skew <= 0 {
		s.skew = 60 * time.Second
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// RedirectURI is the gateway's callback, registered with every authorization server.
func (s *Service) RedirectURI() string { return s.redirectURI }

// Status is owner's connection status to org's providerID, for the policy: StatusConnected,
// StatusMissing or StatusNeedsReconnect (an expired token with no refresh token needs a
// reconnect too). One store read.
func (s *Service) Status(ctx context.Context, org, providerID string, owner Owner) (string, error) {
	st, _, err := s.StatusOf(ctx, org, providerID, owner)
	return st, err
}

// StatusOf is Status with the connection's id ("" when missing), which the audit record names.
func (s *Service) StatusOf(ctx context.Context, org, providerID string, owner Owner) (status, id string, err error) {
	r, err := s.Look(ctx, org, providerID, owner)
	if err != nil {
		return "", "", err
	}
	return r.Status, r.ID, nil
}

// Read is owner's connection to org's provider as one store read found it: its status and id
// for a call's decision, and the record itself, whose token the run of the same call opens
// (TokenFor) rather than read the store a second time.
type Read struct {
	Status string
	ID     string

	org, providerID string
	owner           Owner
	c               store.Connection // zero when missing
}

// Look reads owner's connection to org's providerID: its status for the policy
// (StatusConnected, StatusMissing or StatusNeedsReconnect, an expired token with no refresh
// token needing a reconnect too) and the record, for TokenFor. One store read.
func (s *Service) Look(ctx context.Context, org, providerID string, owner Owner) (*Read, error) {
	if err := owner.validate(); err != nil {
		return nil, err
	}
	r := &Read{Status: StatusMissing, org: org, providerID: providerID, owner: owner}
	c, err := s.store.GetConnection(ctx, org, providerID, owner.Kind, owner.Ref)
	if errors.Is(err, store.ErrNotFound) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("connection status of %s: %w", providerID, err)
	}
	r.Status, r.ID, r.c = c.Status, c.ID, c
	if c.Status == store.ConnectionConnected && c.RefreshSealed == "" && !c.ExpiresAt.IsZero() && !s.now().Before(c.ExpiresAt) {
		r.Status = StatusNeedsReconnect
	}
	return r, nil
}

// List returns org's connections.
func (s *Service) List(ctx context.Context, org string) ([]View, error) {
	cs, err := s.store.ListConnections(ctx, org)
	if err != nil {
		return nil, fmt.Errorf("list connections: %w", err)
	}
	out := make([]View, 0, len(cs))
	for _, c := range cs {
		out = append(out, viewOf(c))
	}
	return out, nil
}

// server is the MCP server providerID with auth oauth and what Discover found of it. With
// org, it must be org's: Start checks, and every later use follows from a request or a
// connection Start allowed.
func (s *Service) server(ctx context.Context, org, providerID string) (Server, error) {
	if isCredential(providerID) {
		return s.credentialServer(ctx, org, providerID)
	}
	unknown := fault.New(fault.NotFound, CodeUnknownProvider,
		"no MCP server %q with OAuth connections is registered in this org", providerID)
	m, err := s.store.GetMCPServer(ctx, providerID)
	if errors.Is(err, store.ErrNotFound) {
		return Server{}, unknown
	}
	if err != nil {
		return Server{}, fmt.Errorf("mcp server %s: %w", providerID, err)
	}
	if m.Auth != "oauth" || len(m.OAuth) == 0 {
		return Server{}, unknown
	}
	if org != "" && m.Org != org {
		owners, err := s.store.BiomeOwners(ctx)
		if err != nil {
			return Server{}, fmt.Errorf("owner of mcp server %s: %w", providerID, err)
		}
		if owners[providerID] != org {
			return Server{}, unknown
		}
	}
	var srv Server
	if err := decodeServer(m.OAuth, &srv); err != nil {
		return Server{}, fmt.Errorf("mcp server %s: oauth: %w", providerID, err)
	}
	return srv, nil
}

// keys is the current keyring, or the fail-closed answer when there is none.
func (s *Service) keys() (*secretbox.Keyring, error) {
	kr, err := s.keyring()
	if err != nil {
		return nil, fault.Wrap(err, fault.Unavailable, CodeTokenUnavailable,
			"the credential keyring is unavailable; nothing was done (fail closed)")
	}
	return kr, nil
}

// The purposes sealed values are bound to (secretbox AAD): a value sealed for one never
// opens as another, nor for another resource, state or connection owner.
func clientSecretAAD(resource string) []byte {
	return []byte("connection/client-secret\x00" + resource)
}
func verifierAAD(stateHash string) []byte { return []byte("connection/verifier\x00" + stateHash) }
func tokenAAD(kind string, c store.Connection) []byte {
	return []byte(strings.Join([]string{"connection/" + kind, c.Org, c.ProviderID, c.OwnerKind, c.OwnerRef}, "\x00"))
}

// Reseal opens c's tokens and seals them again under kr's newest key: the function
// store.ConnectionStore.ResealConnections takes at key rotation.
func Reseal(kr *secretbox.Keyring, c store.Connection) (access, refresh, keyID string, err error) {
	if access, err = reseal(kr, c.AccessSealed, tokenAAD("access", c)); err != nil {
		return "", "", "", fmt.Errorf("connection %s: access token: %w", c.ID, err)
	}
	if c.RefreshSealed != "" {
		if refresh, err = reseal(kr, c.RefreshSealed, tokenAAD("refresh", c)); err != nil {
			return "", "", "", fmt.Errorf("connection %s: refresh token: %w", c.ID, err)
		}
	}
	return access, refresh, kr.KeyID(), nil
}

// ResealServer seals srv's client secret (if any) again under kr's newest key: for the
// servers' OAuth records at key rotation.
func ResealServer(kr *secretbox.Keyring, srv Server) (Server, error) {
	if srv.ClientSecretSealed == "" {
		return srv, nil
	}
	sealed, err := reseal(kr, srv.ClientSecretSealed, clientSecretAAD(srv.Resource))
	if err != nil {
		return Server{}, fmt.Errorf("client secret of %s: %w", srv.Resource, err)
	}
	srv.ClientSecretSealed, srv.KeyID = sealed, kr.KeyID()
	return srv, nil
}

// RotationStore is what key rotation needs of the store: the connections' tokens and the
// servers' OAuth documents, each kind resealed in one transaction.
type RotationStore interface {
	ResealConnections(ctx context.Context, reseal func(store.Connection) (access, refresh, keyID string, err error)) (int, error)
	ResealMCPServerOAuth(ctx context.Context, reseal func(store.MCPServer) (json.RawMessage, error)) (int, error)
}

// Resealers are what credential.Vault.Rotate reseals besides the credentials: every
// connection's tokens, and every OAuth server's client secret (a server without one, a
// public client, is left as it is and not counted).
func Resealers(st RotationStore) []credential.Resealer {
	return []credential.Resealer{
		{Kind: "connection(s)", Reseal: func(ctx context.Context, kr *secretbox.Keyring) (int, error) {
			return st.ResealConnections(ctx, func(c store.Connection) (string, string, string, error) { return Reseal(kr, c) })
		}},
		{Kind: "server client secret(s)", Reseal: func(ctx context.Context, kr *secretbox.Keyring) (int, error) {
			return st.ResealMCPServerOAuth(ctx, func(m store.MCPServer) (json.RawMessage, error) {
				var srv Server
				if err := json.Unmarshal(m.OAuth, &srv); err != nil {
					return nil, fmt.Errorf("mcp server %s: oauth: %w", m.ProviderID, err)
				}
				if srv.ClientSecretSealed == "" {
					return nil, nil
				}
				next, err := ResealServer(kr, srv)
				if err != nil {
					return nil, fmt.Errorf("mcp server %s: %w", m.ProviderID, err)
				}
				return json.Marshal(next)
			})
		}},
	}
}

func reseal(kr *secretbox.Keyring, sealed string, aad []byte) (string, error) {
	pt, err := kr.Open(sealed, aad)
	if err != nil {
		return "", err
	}
	return kr.Seal(pt, aad)
}

func invalidArg(path, msg string) error {
	return &fault.Error{Kind: fault.Invalid, Code: fault.CodeInvalidArgument, Message: path + ": " + msg,
		Violations: []inputschema.Violation{{Path: path, Message: msg}}, NotRun: true}
}

// invalidServer is a discovery or registration failure, naming the registration's field at
// fault (/url or /auth/clientId).
func invalidServer(path, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	return &fault.Error{Kind: fault.Invalid, Code: CodeInvalidOAuthServer, Message: path + ": " + msg,
		Violations: []inputschema.Violation{{Path: path, Message: msg}}, NotRun: true}
}

// printable keeps what an authorization server sent back fit to show: the RFC 6749 error
// characters only, clipped.
func printable(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return -1
		}
		return r
	}, s)
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}
