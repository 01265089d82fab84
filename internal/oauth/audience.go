package oauth

import (
	"context"
	"sync"
)

// maxAudiences bounds the per-audience token sources kept (one per provider origin).
const maxAudiences = 1024

// AudienceTokens mints client_credentials tokens per audience: each provider gets a token
// requested with its own "audience" parameter, cached and refreshed like any TokenSource.
// (Keycloak ignores the parameter and needs an audience mapper per provider client scope;
// the inbound verifier refuses the gateway's own client id either way.)
type AudienceTokens struct {
	cfg Config
	mu  sync.Mutex
	by  map[string]*TokenSource
}

// NewAudienceTokens checks cfg (its Audience is ignored: each call names one).
func NewAudienceTokens(cfg Config) (*AudienceTokens, error) {
	cfg.Audience = ""
	if _, err := NewTokenSource(cfg); err != nil {
		return nil, err
	}
	return &AudienceTokens{cfg: cfg, by: map[string]*TokenSource{}}, nil
}

// ClientID is the OAuth client the tokens are minted for.
func (a *AudienceTokens) ClientID() string { return a.cfg.ClientID }

// Token returns a valid token for audience.
func (a *AudienceTokens) Token(ctx context.Context, audience string) (string, error) {
	a.mu.Lock()
	ts, ok := a.by[audience]
	if !ok {
		if len(a.by) >= maxAudiences {
			for k := range a.by { // drop one: its audience mints again on its next call
				delete(a.by, k)
				break
			}
		}
		cfg := a.cfg
		cfg.Audience = audience
		var err error
		if ts, err = NewTokenSource(cfg); err != nil {
			a.mu.Unlock()
			return "", &NoTokenError{Detail: err.Error()}
		}
		a.by[audience] = ts
	}
	a.mu.Unlock()
	return ts.Token(ctx)
}

// AudienceTokens is the per-audience client_credentials source of this registration.
func (r Registration) AudienceTokens(scopes ...string) (*AudienceTokens, error) {
	return NewAudienceTokens(Config{TokenURL: r.TokenEndpoint, ClientID: r.ClientID, ClientSecret: r.ClientSecret, Scopes: scopes})
}
