package connection

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/store"
)

// refreshTimeout bounds one refresh, which every caller waiting on it shares.
const refreshTimeout = 30 * time.Second

// Token returns an access token of owner's connection to org's providerID usable now,
// refreshing it first when it expires within RefreshSkew: one refresh per connection at a
// time on this replica, and across replicas the store's compare-and-set on Version decides
// (the loser uses the winner's token). A refresh the server refuses marks the connection
// needs-reconnect (CONNECTION_EXPIRED); a server that cannot be reached changes nothing
// (CodeTokenUnavailable, fail closed).
func (s *Service) Token(ctx context.Context, org, providerID string, owner Owner) (credential.Secret, View, error) {
	return s.TokenFor(ctx, org, providerID, owner, nil)
}

// TokenFor is Token for a call whose decision read the connection (read, from Look): when
// that read is of this owner's connection to org's providerID, connected, and its token
// usable with RefreshSkew to spare, the token is opened from it without reading the store
// again; otherwise (no read, another connection, a token to refresh) it is Token. The call
// thus runs on the connection its decision saw, as read within that call: a disconnect
// committed after the decision's read stops the calls decided after it, not that one.
func (s *Service) TokenFor(ctx context.Context, org, providerID string, owner Owner, read *Read) (credential.Secret, View, error) {
	if err := owner.validate(); err != nil {
		return credential.Secret{}, View{}, err
	}
	if read != nil && read.org == org && read.providerID == providerID && read.owner == owner &&
		read.c.Status == store.ConnectionConnected && s.fresh(read.c) {
		return s.open(read.c)
	}
	c, err := s.get(ctx, org, providerID, owner)
	if err != nil {
		return credential.Secret{}, View{}, err
	}
	if s.fresh(c) {
		return s.open(c)
	}
	// Callers on this replica share one refresh; it outlives a caller that gives up, so the
	// others still get its token (and a rotated refresh token is never lost mid-flight).
	ch := s.refreshes.DoChan(c.ID, func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refreshTimeout)
		defer cancel()
		return s.refresh(rctx, org, providerID, owner)
	})
	select {
	case <-ctx.Done():
		return credential.Secret{}, View{}, fault.Wrap(ctx.Err(), fault.Unavailable, CodeTokenUnavailable,
			"the connection's token was not refreshed in time")
	case r := <-ch:
		if r.Err != nil {
			return credential.Secret{}, View{}, r.Err
		}
		return s.open(r.Val.(store.Connection))
	}
}

// get is owner's connection, or why there is none usable.
func (s *Service) get(ctx context.Context, org, providerID string, owner Owner) (store.Connection, error) {
	c, err := s.store.GetConnection(ctx, org, providerID, owner.Kind, owner.Ref)
	if errors.Is(err, store.ErrNotFound) {
		return store.Connection{}, required(providerID, owner)
	}
	if err != nil {
		return store.Connection{}, fmt.Errorf("connection to %s: %w", providerID, err)
	}
	if c.Status != store.ConnectionConnected {
		return store.Connection{}, expired(providerID)
	}
	return c, nil
}

func required(providerID string, owner Owner) error {
	whose := "the org has"
	if owner.Kind == store.OwnerUser {
		whose = "you have"
	}
	return &fault.Error{Kind: fault.Denied, Code: CodeRequired, NotRun: true,
		Message: fmt.Sprintf("%s no connection to %s: connect first (POST /v1/connections)", whose, providerID)}
}

func expired(providerID string) error {
	return &fault.Error{Kind: fault.Denied, Code: CodeExpired, NotRun: true,
		Message: fmt.Sprintf("the connection to %s has expired and needs a reconnect", providerID)}
}

// fresh reports whether c's access token is usable now, with RefreshSkew to spare.
func (s *Service) fresh(c store.Connection) bool {
	return c.ExpiresAt.IsZero() || s.now().Add(s.skew).Before(c.ExpiresAt)
}

// open reveals c's access token.
func (s *Service) open(c store.Connection) (credential.Secret, View, error) {
	kr, err := s.keys()
	if err != nil {
		return credential.Secret{}, View{}, err
	}
	b, err := kr.Open(c.AccessSealed, tokenAAD("access", c))
	if err != nil {
		return credential.Secret{}, View{}, fault.Wrap(err, fault.Unavailable, CodeTokenUnavailable,
			"the connection's token could not be opened (is the key it was sealed with still in the keyring?)")
	}
	return credential.NewSecret(string(b)), viewOf(c), nil
}

// refresh refreshes owner's connection unless it is fresh once read again (another caller,
// or replica, refreshed it meanwhile), and returns it.
func (s *Service) refresh(ctx context.Context, org, providerID string, owner Owner) (store.Connection, error) {
	c, err := s.get(ctx, org, providerID, owner)
	if err != nil || s.fresh(c) {
		return c, err
	}
	if c.RefreshSealed == "" {
		if s.now().Before(c.ExpiresAt) {
			return c, nil // about to expire and no way to renew it: use it while it lasts
		}
		return s.markExpired(ctx, c)
	}
	srv, err := s.server(ctx, "", providerID)
	if err != nil {
		return store.Connection{}, err
	}
	kr, err := s.keys()
	if err != nil {
		return store.Connection{}, err
	}
	rt, err := kr.Open(c.RefreshSealed, tokenAAD("refresh", c))
	if err != nil {
		return store.Connection{}, fault.Wrap(err, fault.Unavailable, CodeTokenUnavailable,
			"the connection's refresh token could not be opened (is the key it was sealed with still in the keyring?)")
	}
	conf, err := s.clientConfig(kr, srv)
	if err != nil {
		return store.Connection{}, err
	}
	// An expired token makes the source refresh; it keeps the old refresh token when the
	// server returns none (no rotation).
	tok, err := conf.TokenSource(s.oauthContext(ctx), &oauth2.Token{RefreshToken: string(rt), Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		if refused(err) {
			return s.markExpired(ctx, c)
		}
		// Not err itself: an x/oauth2 RetrieveError carries the answer's whole body, which
		// may echo what was sent (the refresh token, the client secret).
		return store.Connection{}, fault.Wrap(errors.New(failure(err)), fault.Unavailable, CodeTokenUnavailable,
			"the authorization server of %s could not be reached to refresh the connection's token; try again", providerID)
	}
	if err := checkToken(tok); err != nil {
		return store.Connection{}, err
	}
	now := s.now().UTC()
	next := c
	next.Version, next.RefreshedAt, next.ExpiresAt = c.Version+1, now, expiry(tok, now)
	next.Scopes = grantedScopes(tok, c.Scopes)
	if err := sealTokens(kr, &next, tok); err != nil {
		return store.Connection{}, err
	}
	return s.update(ctx, next, providerID, owner)
}

// update stores next; when another replica updated the connection first, its version is
// the one to use.
func (s *Service) update(ctx context.Context, next store.Connection, providerID string, owner Owner) (store.Connection, error) {
	err := s.store.UpdateConnection(ctx, next)
	switch {
	case err == nil:
		return next, nil
	case errors.Is(err, store.ErrConflict):
		return s.get(ctx, next.Org, providerID, owner)
	case errors.Is(err, store.ErrNotFound):
		return store.Connection{}, required(providerID, owner)
	}
	return store.Connection{}, fmt.Errorf("update connection %s: %w", next.ID, err)
}

// markExpired stores c as needing a reconnect and answers CONNECTION_EXPIRED (or, when
// another replica refreshed it meanwhile, that connection).
func (s *Service) markExpired(ctx context.Context, c store.Connection) (store.Connection, error) {
	next := c
	next.Status, next.Version = store.ConnectionNeedsReconnect, c.Version+1
	got, err := s.update(ctx, next, c.ProviderID, Owner{Kind: c.OwnerKind, Ref: c.OwnerRef})
	if err != nil {
		return store.Connection{}, err
	}
	if got.Status != store.ConnectionConnected {
		return store.Connection{}, expired(c.ProviderID)
	}
	return got, nil
}

// failure says why a token request failed without quoting the answer: its status and its
// error code, or that the server was not reached.
func failure(err error) string {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		return "the token endpoint was not reached or its answer was not a token answer"
	}
	what := "the token endpoint answered an error"
	if re.Response != nil {
		what = "the token endpoint answered " + re.Response.Status
	}
	if c := printable(re.ErrorCode, 64); c != "" {
		what += " " + c
	}
	return what
}

// refused reports whether a token request failed because the server refused it (an RFC 6749
// error answer, 400 or 401: the grant is gone or the client unknown), as opposed to not
// answering or failing (a 5xx, or an error it says is its own and passing).
func refused(err error) bool {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.Response == nil {
		return false
	}
	if re.ErrorCode == "server_error" || re.ErrorCode == "temporarily_unavailable" {
		return false
	}
	return re.Response.StatusCode == http.StatusBadRequest || re.Response.StatusCode == http.StatusUnauthorized
}

// Disconnect deletes org's connection id and revokes its tokens at the authorization server
// when it offers revocation (RFC 7009): the refresh token first (which, at most servers,
// revokes the access tokens issued with it), then the access token. A failed revocation
// shows as Revoked false; the connection is gone either way.
func (s *Service) Disconnect(ctx context.Context, org, id string) (View, error) {
	c, err := s.store.DeleteConnection(ctx, org, id)
	if errors.Is(err, store.ErrNotFound) {
		return View{}, fault.New(fault.NotFound, CodeNotFound, "no connection %q in this org", id)
	}
	if err != nil {
		return View{}, fmt.Errorf("delete connection %s: %w", id, err)
	}
	v := viewOf(c)
	revoked := s.revoke(ctx, c)
	v.Revoked = &revoked
	return v, nil
}

// revoke revokes c's tokens, reporting whether the server confirmed every revocation.
func (s *Service) revoke(ctx context.Context, c store.Connection) bool {
	srv, err := s.server(ctx, "", c.ProviderID)
	if err != nil || srv.RevocationEndpoint == "" {
		return false
	}
	kr, err := s.keys()
	if err != nil {
		return false
	}
	secret, err := clientSecret(kr, srv)
	if err != nil {
		return false
	}
	ok := true
	for _, t := range []struct{ sealed, kind, hint string }{
		{c.RefreshSealed, "refresh", "refresh_token"}, {c.AccessSealed, "access", "access_token"}} {
		if t.sealed == "" {
			continue
		}
		tok, err := kr.Open(t.sealed, tokenAAD(t.kind, c))
		if err != nil {
			ok = false
			continue
		}
		if err := s.revokeOne(ctx, srv, secret, string(tok), t.hint); err != nil {
			ok = false
		}
	}
	return ok
}

// revokeOne sends one RFC 7009 revocation request, the client authenticating as at the
// token endpoint.
func (s *Service) revokeOne(ctx context.Context, srv Server, secret, token, hint string) error {
	form := url.Values{"token": {token}, "token_type_hint": {hint}}
	if srv.TokenAuthMethod != "client_secret_basic" {
		form.Set("client_id", srv.ClientID)
		if secret != "" {
			form.Set("client_secret", secret)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.RevocationEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return fmt.Errorf("revocation request: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if srv.TokenAuthMethod == "client_secret_basic" {
		req.SetBasicAuth(url.QueryEscape(srv.ClientID), url.QueryEscape(secret))
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("revoke: %s", resp.Status)
	}
	return nil
}
