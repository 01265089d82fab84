package connection

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/secretbox"
	"github.com/xemahq/xema/internal/store"
)

// Start begins connecting owner to org's providerID, on behalf of by: it stores the
// authorization request (the hash of a random state, the sealed PKCE verifier, bound to org,
// owner, provider and by, single-use, StateTTL) and returns the authorization URL to send
// the person to.
func (s *Service) Start(ctx context.Context, org, providerID string, owner Owner, by string) (Started, error) {
	if err := owner.validate(); err != nil {
		return Started{}, err
	}
	srv, err := s.server(ctx, org, providerID)
	if err != nil {
		return Started{}, err
	}
	if srv.Owner != owner.Kind {
		return Started{}, invalidArg("/owner/kind", fmt.Sprintf("the server %s takes %s connections", providerID, srv.Owner))
	}
	kr, err := s.keys()
	if err != nil {
		return Started{}, err
	}
	state := randomToken()
	verifier := oauth2.GenerateVerifier()
	hash := stateHash(state)
	sealed, err := kr.Seal([]byte(verifier), verifierAAD(hash))
	if err != nil {
		return Started{}, fault.Wrap(err, fault.Unavailable, CodeTokenUnavailable, "the authorization request could not be sealed")
	}
	now := s.now().UTC()
	st := store.ConnectionState{State: hash, Org: org, ProviderID: providerID, OwnerKind: owner.Kind, OwnerRef: owner.Ref,
		CreatedBy: by, VerifierSealed: sealed, KeyID: kr.KeyID(), CreatedAt: now, ExpiresAt: now.Add(s.stateTTL)}
	if err := s.store.PutConnectionState(ctx, st); err != nil {
		return Started{}, fmt.Errorf("store connection state: %w", err)
	}
	authURL := s.oauthConfig(srv, "").AuthCodeURL(state, append(resourceOption(srv), oauth2.S256ChallengeOption(verifier))...)
	return Started{URL: authURL, ExpiresAt: st.ExpiresAt}, nil
}

// Complete is the callback: it takes the authorization request of state (once), refuses an
// authorization the server refused (errCode), exchanges code with the PKCE verifier, the
// redirect URI and the resource, and stores the tokens as the owner's connection (replacing
// any previous one).
func (s *Service) Complete(ctx context.Context, state, code, errCode, errDescription string) (View, error) {
	return s.CompleteAs(ctx, "", state, code, errCode, errDescription)
}

// CompleteAs is Complete for a callback whose caller is known (by, as given to Start): a
// request another started is refused as an invalid state, so no one can have a person
// complete a connection that would be someone else's (the request is used up all the same).
// by "" checks nothing.
func (s *Service) CompleteAs(ctx context.Context, by, state, code, errCode, errDescription string) (View, error) {
	if state == "" {
		return View{}, invalidState()
	}
	st, err := s.store.TakeConnectionState(ctx, stateHash(state), s.now().UTC())
	if errors.Is(err, store.ErrNotFound) {
		return View{}, invalidState()
	}
	if err != nil {
		return View{}, fmt.Errorf("take connection state: %w", err)
	}
	if by != "" && st.CreatedBy != by {
		return View{}, invalidState()
	}
	if errCode != "" {
		// Its error code only: the description is the authorization server's own text, which
		// the gateway's page would otherwise show as its own.
		return View{}, &fault.Error{Kind: fault.Denied, Code: CodeAuthorizationFailed, NotRun: true,
			Message: "the authorization server refused the authorization: " + printable(errCode, 64)}
	}
	if code == "" {
		return View{}, &fault.Error{Kind: fault.Invalid, Code: CodeAuthorizationFailed, NotRun: true,
			Message: "the callback carries neither a code nor an error"}
	}
	srv, err := s.server(ctx, "", st.ProviderID)
	if err != nil {
		return View{}, err
	}
	kr, err := s.keys()
	if err != nil {
		return View{}, err
	}
	verifier, err := kr.Open(st.VerifierSealed, verifierAAD(st.State))
	if err != nil {
		return View{}, fault.Wrap(err, fault.Unavailable, CodeTokenUnavailable, "the authorization request could not be opened")
	}
	conf, err := s.clientConfig(kr, srv)
	if err != nil {
		return View{}, err
	}
	tok, err := conf.Exchange(s.oauthContext(ctx), code, append(resourceOption(srv), oauth2.VerifierOption(string(verifier)))...)
	if err != nil {
		return View{}, exchangeError(err)
	}
	if err := checkToken(tok); err != nil {
		return View{}, err
	}
	now := s.now().UTC()
	c := store.Connection{ID: newID(), Org: st.Org, ProviderID: st.ProviderID, OwnerKind: st.OwnerKind, OwnerRef: st.OwnerRef,
		Status: store.ConnectionConnected, Scopes: grantedScopes(tok, srv.Scopes), ExpiresAt: expiry(tok, now),
		Version: 1, CreatedBy: st.CreatedBy, CreatedAt: now}
	if err := sealTokens(kr, &c, tok); err != nil {
		return View{}, err
	}
	if err := s.store.PutConnection(ctx, c); err != nil {
		return View{}, fmt.Errorf("store connection: %w", err)
	}
	return viewOf(c), nil
}

func invalidState() error {
	return &fault.Error{Kind: fault.Invalid, Code: CodeInvalidState, NotRun: true,
		Message: "the connection request is unknown, already used or expired: start connecting again"}
}

// exchangeError is the answer to a failed code exchange: the server's refusal, by its error
// code only (its description and body may echo what was sent), or its absence.
func exchangeError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		what := printable(re.ErrorCode, 64)
		if what == "" && re.Response != nil {
			what = re.Response.Status
		}
		if !refused(err) {
			return fault.Wrap(errors.New(what), fault.Unavailable, CodeTokenUnavailable,
				"the authorization server failed the code exchange (%s); start connecting again", what)
		}
		return fault.Wrap(errors.New(what), fault.Provider, CodeAuthorizationFailed,
			"the authorization server refused the code exchange: %s", what)
	}
	if strings.Contains(err.Error(), "missing access_token") {
		return fault.New(fault.Provider, CodeAuthorizationFailed, "the authorization server's token answer has no access_token")
	}
	return fault.Wrap(errors.New(failure(err)), fault.Unavailable, CodeTokenUnavailable,
		"the authorization server could not be reached for the code exchange; start connecting again")
}

// oauthConfig is the client at srv (secret: the client secret in clear, or "").
func (s *Service) oauthConfig(srv Server, secret string) *oauth2.Config {
	style := oauth2.AuthStyleInParams
	if srv.TokenAuthMethod == "client_secret_basic" {
		style = oauth2.AuthStyleInHeader
	}
	return &oauth2.Config{ClientID: srv.ClientID, ClientSecret: secret, RedirectURL: s.redirectURI, Scopes: srv.Scopes,
		Endpoint: oauth2.Endpoint{AuthURL: srv.AuthorizationEndpoint, TokenURL: srv.TokenEndpoint, AuthStyle: style}}
}

// clientConfig is oauthConfig with the client secret opened.
func (s *Service) clientConfig(kr *secretbox.Keyring, srv Server) (*oauth2.Config, error) {
	secret, err := clientSecret(kr, srv)
	if err != nil {
		return nil, err
	}
	return s.oauthConfig(srv, secret), nil
}

func clientSecret(kr *secretbox.Keyring, srv Server) (string, error) {
	if srv.credential != nil {
		sec, err := credential.Unseal(kr, *srv.credential)
		if err != nil {
			return "", fault.Wrap(err, fault.Unavailable, CodeTokenUnavailable, "the client secret could not be opened")
		}
		return sec.Reveal(), nil
	}
	if srv.ClientSecretSealed == "" {
		return "", nil
	}
	b, err := kr.Open(srv.ClientSecretSealed, clientSecretAAD(srv.Resource))
	if err != nil {
		return "", fault.Wrap(err, fault.Unavailable, CodeTokenUnavailable, "the client secret could not be opened")
	}
	return string(b), nil
}

// resourceOption is the RFC 8707 resource indicator of an MCP server (an OAuth credential's
// provider names none).
func resourceOption(srv Server) []oauth2.AuthCodeOption {
	if srv.Resource == "" {
		return nil
	}
	return []oauth2.AuthCodeOption{oauth2.SetAuthURLParam("resource", srv.Resource)}
}

// oauthContext has x/oauth2 make its requests with the service's client.
func (s *Service) oauthContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, s.http)
}

// sealTokens seals tok's tokens into c, under kr's newest key.
func sealTokens(kr *secretbox.Keyring, c *store.Connection, tok *oauth2.Token) error {
	var err error
	if c.AccessSealed, err = kr.Seal([]byte(tok.AccessToken), tokenAAD("access", *c)); err != nil {
		return fault.Wrap(err, fault.Unavailable, CodeTokenUnavailable, "the token could not be sealed")
	}
	c.RefreshSealed = ""
	if tok.RefreshToken != "" {
		if c.RefreshSealed, err = kr.Seal([]byte(tok.RefreshToken), tokenAAD("refresh", *c)); err != nil {
			return fault.Wrap(err, fault.Unavailable, CodeTokenUnavailable, "the token could not be sealed")
		}
	}
	c.KeyID = kr.KeyID()
	return nil
}

// maxLifetime caps what a token answer may claim: a larger expires_in is taken as this.
const maxLifetime = 366 * 24 * time.Hour

// expiry is when tok expires by the service's clock: zero when the server declared no
// expiry. A JSON answer's expires_in is in ExpiresIn; x/oauth2 reads a form-encoded answer's
// (GitHub's) into Expiry only, by the wall clock, which is turned into a lifetime here.
func expiry(tok *oauth2.Token, now time.Time) time.Time {
	life := time.Duration(tok.ExpiresIn) * time.Second
	if tok.ExpiresIn == 0 && !tok.Expiry.IsZero() {
		life = time.Until(tok.Expiry)
	}
	switch {
	case tok.ExpiresIn == 0 && tok.Expiry.IsZero():
		return time.Time{}
	case life > maxLifetime:
		life = maxLifetime
	}
	return now.Add(life)
}

// checkToken refuses a token answer the gateway cannot use as a bearer token: another token
// type, or a negative lifetime.
func checkToken(tok *oauth2.Token) error {
	switch {
	case !strings.EqualFold(tok.Type(), "bearer"):
		return fault.New(fault.Provider, CodeAuthorizationFailed, "the authorization server issued a %q token, not a bearer token", printable(tok.Type(), 32))
	case tok.ExpiresIn < 0:
		return fault.New(fault.Provider, CodeAuthorizationFailed, "the authorization server's token answer has a negative expires_in")
	}
	return nil
}

// grantedScopes are the scopes the token answer says were granted, else those asked for.
func grantedScopes(tok *oauth2.Token, asked []string) []string {
	if s, ok := tok.Extra("scope").(string); ok && s != "" {
		return strings.Fields(s)
	}
	return append([]string{}, asked...)
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

func newID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "conn_" + hex.EncodeToString(b)
}

func stateHash(state string) string {
	sum := sha256.Sum256([]byte(state))
	return hex.EncodeToString(sum[:])
}

func decodeServer(raw json.RawMessage, srv *Server) error {
	if err := json.Unmarshal(raw, srv); err != nil {
		return err
	}
	if srv.ClientID == "" || srv.TokenEndpoint == "" || srv.AuthorizationEndpoint == "" {
		return errors.New("incomplete: no client id or endpoints")
	}
	return nil
}
