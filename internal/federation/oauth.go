package federation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/runner"
	"github.com/xemahq/xema/internal/store"
)

// AuthOAuth is the auth kind of a server protected by OAuth (the MCP authorization spec):
// its calls carry the token of a connection, the org's or the calling person's.
const AuthOAuth = "oauth"

// Connections is what the federation needs of the connections (connection.Service).
type Connections interface {
	Discover(ctx context.Context, serverURL string, a connection.Auth) (connection.Server, error)
	Look(ctx context.Context, org, providerID string, owner connection.Owner) (*connection.Read, error)
	Token(ctx context.Context, org, providerID string, owner connection.Owner) (credential.Secret, connection.View, error)
	TokenFor(ctx context.Context, org, providerID string, owner connection.Owner, read *connection.Read) (credential.Secret, connection.View, error)
	Complete(ctx context.Context, state, code, errCode, errDescription string) (connection.View, error)
}

// Connected is the callback's answer: the connection made, and the sync of a server whose
// tools no connection had listed yet (nil otherwise, or when it failed: SyncError says why).
type Connected struct {
	Connection connection.View `json:"connection"`
	Sync       *SyncResult     `json:"sync,omitempty"`
	SyncError  string          `json:"syncError,omitempty"`
}

// Complete finishes a connection at the callback; the first connection to a server lists
// its tools (a sync as the person who connected), which an org admin then approves.
func (f *Federation) Complete(ctx context.Context, state, code, errCode, errDescription string) (Connected, error) {
	if f.conns == nil {
		return Connected{}, fault.New(fault.NotImplemented, connection.CodeInvalidState, "this gateway has no connections configured")
	}
	v, err := f.conns.Complete(ctx, state, code, errCode, errDescription)
	if err != nil {
		return Connected{}, err
	}
	out := Connected{Connection: v}
	srv, err := f.store.GetMCPServer(ctx, v.ProviderID)
	if err != nil || len(srv.Tools) > 0 {
		return out, nil //nolint:nilerr // the connection is made; a sync is only a courtesy
	}
	res, err := f.Sync(ctx, v.ProviderID, v.CreatedBy)
	if err != nil {
		out.SyncError = fault.Of(err).Message
		slog.WarnContext(ctx, "first sync after a connection failed", "provider", v.ProviderID, "err", err)
		return out, nil
	}
	out.Sync = res
	return out, nil
}

// Secrets opens an org's stored credential (a registration's clientSecretRef).
type Secrets interface {
	Get(ctx context.Context, id string) (credential.Metadata, error)
	Open(ctx context.Context, id string) (credential.Secret, error)
}

// oauthOf decodes what discovery stored of srv; ok is false for a server of another auth.
func oauthOf(srv store.MCPServer) (connection.Server, bool, error) {
	if srv.Auth != AuthOAuth {
		return connection.Server{}, false, nil
	}
	var s connection.Server
	if err := json.Unmarshal(srv.OAuth, &s); err != nil {
		return connection.Server{}, false, fmt.Errorf("mcp server %s: oauth: %w", srv.ProviderID, err)
	}
	return s, true, nil
}

// Connection implements gateway.Connections: for a tool of a server registered with auth
// oauth, whose connection the call needs and its status (nil for every other capability),
// and the connection as read (a *connection.Read), which the call's run takes back
// (runner.Decided) rather than read it again.
func (f *Federation) Connection(ctx context.Context, ec identity.ExecContext, entry *catalog.Entry) (*policy.Connection, any, error) {
	c := entry.Capability
	if c.RunnerKind != RunnerKind {
		return nil, nil, nil
	}
	k, err := f.serverOf(ctx, c.BiomeID, c.BiomeVersion)
	if err != nil {
		return nil, nil, err
	}
	if k.err != nil || !k.oauth {
		return nil, nil, k.err
	}
	srv, auth := k.srv, k.auth
	in := &policy.Connection{Provider: srv.ProviderID, Owner: auth.Owner, Status: connection.StatusMissing, ConnectURL: f.connectURL}
	owner, ok := connection.OwnerFor(ec, auth.Owner)
	if !ok || f.conns == nil {
		return in, nil, nil
	}
	in.Person = owner.Ref
	read, err := f.conns.Look(ctx, ec.Org, srv.ProviderID, owner)
	if err != nil {
		return nil, nil, err
	}
	in.Status, in.ID = read.Status, read.ID
	return in, read, nil
}

// discover checks an oauth registration and finds the server's authorization server,
// registering the gateway as a client there unless given one.
func (f *Federation) discover(ctx context.Context, r Registration, srv *store.MCPServer) error {
	a := r.Auth
	if f.conns == nil {
		return fault.New(fault.NotImplemented, CodeInvalidServer, "this gateway has no connections configured (xema serve --public-url)")
	}
	switch {
	case a.Owner != store.OwnerOrg && a.Owner != store.OwnerUser:
		return invalidServer("/auth/owner", `an oauth server needs owner "org" (one account for the org) or "user" (each person's own)`)
	case a.ClientSecretRef != "" && a.ClientID == "":
		return invalidServer("/auth/clientSecretRef", "a client secret needs its clientId")
	}
	auth := connection.Auth{Owner: a.Owner, ClientID: a.ClientID, Scopes: a.Scopes}
	if a.ClientSecretRef != "" {
		secret, err := f.secret(ctx, srv.Org, a.ClientSecretRef)
		if err != nil {
			return err
		}
		auth.ClientSecret = secret
	}
	found, err := f.conns.Discover(ctx, srv.URL, auth)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(found)
	if err != nil {
		return fmt.Errorf("encode oauth of %s: %w", srv.ProviderID, err)
	}
	srv.OAuth = raw
	return nil
}

// secret opens credential id of org: another org's, or none, is the same unknown reference.
func (f *Federation) secret(ctx context.Context, org, id string) (string, error) {
	unknown := invalidServer("/auth/clientSecretRef", fmt.Sprintf("no credential %q in this org (store the client secret first: POST /v1/credentials)", id))
	if f.secrets == nil {
		return "", unknown
	}
	m, err := f.secrets.Get(ctx, id)
	var fe *fault.Error
	switch {
	case errors.As(err, &fe) && fe.Kind == fault.NotFound:
		return "", unknown
	case err != nil:
		return "", err
	case m.Org != org:
		return "", unknown
	}
	s, err := f.secrets.Open(ctx, id)
	if err != nil {
		return "", err
	}
	return s.Reveal(), nil
}

// syncOwner is whose connection lists the tools of an oauth server in a sync by by: the
// org's, or by's own (the registering person's for the gateway's own re-syncs).
func syncOwner(srv store.MCPServer, auth connection.Server, by string) connection.Owner {
	if auth.Owner == store.OwnerOrg {
		return connection.Owner{Kind: store.OwnerOrg}
	}
	if by == SyncActor {
		by = srv.RegisteredBy
	}
	return connection.Owner{Kind: store.OwnerUser, Ref: by}
}

// tokenKey carries a connection's token to the requests of one call (or one sync).
type tokenKey struct{}

func withToken(ctx context.Context, tok credential.Secret) context.Context {
	return context.WithValue(ctx, tokenKey{}, tok)
}

// connectionBearer adds the token of the request's connection; a request without one, or
// to another origin than the server's, never leaves.
type connectionBearer struct {
	next     http.RoundTripper
	audience string
}

func (b connectionBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	tok, ok := r.Context().Value(tokenKey{}).(credential.Secret)
	if !ok || tok.Reveal() == "" {
		return nil, fault.New(fault.Internal, runner.CodeNoToken, "no connection token for this request to the MCP server")
	}
	if !sameOrigin(r.URL, b.audience) {
		return nil, fault.New(fault.Provider, runner.CodeRedirect, "the MCP server's request left its registered origin")
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+tok.Reveal())
	return b.next.RoundTrip(r)
}

// token is the token of owner's connection to srv, for a request of ctx: an error, typed
// and never holding the token, says the call did not run.
func (f *Federation) token(ctx context.Context, org string, srv store.MCPServer, owner connection.Owner) (context.Context, string, error) {
	if f.conns == nil {
		return ctx, "", fault.New(fault.Unavailable, connection.CodeTokenUnavailable, "this gateway has no connections configured")
	}
	// A call's run takes the connection its decision read (Connection); a sync has none.
	read, _ := runner.Decided(ctx).(*connection.Read)
	tok, v, err := f.conns.TokenFor(ctx, org, srv.ProviderID, owner, read)
	if err != nil {
		return ctx, "", err
	}
	return withToken(ctx, tok), v.ID, nil
}
