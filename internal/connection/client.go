package connection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/store"
)

// Client describes an OAuth client an org admin registered at a provider's authorization
// server (GitHub, Slack: providers without the MCP authorization spec's discovery), stored
// as an OAuth credential whose secret is the client secret. Connections to it are keyed by
// the credential's id, and serve the connectors bound to that credential.
type Client struct {
	Owner                 string   `json:"owner"`
	AuthorizationEndpoint string   `json:"authorizationEndpoint"`
	TokenEndpoint         string   `json:"tokenEndpoint"`
	RevocationEndpoint    string   `json:"revocationEndpoint,omitempty"`
	ClientID              string   `json:"clientId"`
	Scopes                []string `json:"scopes,omitempty"`
	// TokenAuthMethod: client_secret_post (default, GitHub's and Slack's) or client_secret_basic.
	TokenAuthMethod string `json:"tokenAuthMethod,omitempty"`
}

// credentialPrefix marks a provider id that is an OAuth credential's (credential ids).
const credentialPrefix = "cred_"

// CheckClient checks c as an OAuth credential's description and answers it encoded for the
// store, every violation named by its path under /oauth.
func CheckClient(c Client) (json.RawMessage, error) {
	if c.TokenAuthMethod == "" {
		c.TokenAuthMethod = "client_secret_post"
	}
	switch {
	case c.Owner != store.OwnerOrg && c.Owner != store.OwnerUser:
		return nil, invalidArg("/oauth/owner", `must be "org" (one account for the org) or "user" (each person's own)`)
	case c.ClientID == "":
		return nil, invalidArg("/oauth/clientId", "is required")
	case c.AuthorizationEndpoint == "":
		return nil, invalidArg("/oauth/authorizationEndpoint", "is required")
	case c.TokenEndpoint == "":
		return nil, invalidArg("/oauth/tokenEndpoint", "is required")
	case c.TokenAuthMethod != "client_secret_post" && c.TokenAuthMethod != "client_secret_basic":
		return nil, invalidArg("/oauth/tokenAuthMethod", "must be client_secret_post or client_secret_basic")
	}
	for path, u := range map[string]string{"/oauth/authorizationEndpoint": c.AuthorizationEndpoint,
		"/oauth/tokenEndpoint": c.TokenEndpoint, "/oauth/revocationEndpoint": c.RevocationEndpoint} {
		if why := httpsOrLoopback(u); why != "" {
			return nil, invalidArg(path, why)
		}
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode oauth client: %w", err)
	}
	return raw, nil
}

// credentialServer is org's OAuth credential id as a Server: its client secret is the
// credential's sealed secret, opened only when a token request needs it.
func (s *Service) credentialServer(ctx context.Context, org, id string) (Server, error) {
	unknown := fault.New(fault.NotFound, CodeUnknownProvider, "no OAuth credential %q is stored in this org", id)
	c, err := s.store.GetCredential(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Server{}, unknown
	case err != nil:
		return Server{}, fmt.Errorf("credential %s: %w", id, err)
	case len(c.OAuth) == 0 || (org != "" && c.Org != org):
		return Server{}, unknown
	}
	var cl Client
	if err := json.Unmarshal(c.OAuth, &cl); err != nil {
		return Server{}, fmt.Errorf("credential %s: oauth: %w", id, err)
	}
	return Server{Owner: cl.Owner, AuthorizationEndpoint: cl.AuthorizationEndpoint, TokenEndpoint: cl.TokenEndpoint,
		RevocationEndpoint: cl.RevocationEndpoint, ClientID: cl.ClientID, Scopes: cl.Scopes, TokenAuthMethod: cl.TokenAuthMethod,
		credential: &c}, nil
}

// OwnerFor is whose connection a call of ec needs from a provider taking owner's: the org's,
// or the person's own (the caller, or the person a delegated call acts for). ok is false
// when the call has no person for a user connection.
func OwnerFor(ec identity.ExecContext, owner string) (Owner, bool) {
	if owner == store.OwnerOrg {
		return Owner{Kind: store.OwnerOrg}, true
	}
	if d := ec.Delegation; d != nil && d.Person.Kind == "user" {
		return Owner{Kind: store.OwnerUser, Ref: d.Person.Ref}, true
	}
	if ec.Subject.Kind == "user" && ec.Delegation == nil {
		return Owner{Kind: store.OwnerUser, Ref: ec.Subject.Ref}, true
	}
	return Owner{Kind: store.OwnerUser}, false
}

// isCredential says providerID names an OAuth credential rather than an MCP server.
func isCredential(providerID string) bool { return strings.HasPrefix(providerID, credentialPrefix) }
