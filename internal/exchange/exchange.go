// Package exchange gets, for a call to a provider the operator configured so, a token meant
// for that provider by RFC 8693 token exchange: the caller's verified inbound token (the
// subject) is exchanged at the provider's authorization server, the gateway authenticating
// as its own client and presenting its own token as the actor when asked, so the provider
// receives a token whose sub is the person and whose act names the gateway. The client is
// zitadel/oidc's pkg/client/tokenexchange. Tokens are cached per (org, subject, actor,
// audience, resource, scopes) until shortly before they expire, in a bounded cache, and
// concurrent calls share one exchange. Nothing of a token is logged or answered.
package exchange

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/client/tokenexchange"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"golang.org/x/sync/singleflight"

	"github.com/xemahq/xema/internal/bounded"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/runner"
)

// CodeFailed refuses a call whose token exchange failed: nothing was sent to its provider.
const CodeFailed = "TOKEN_EXCHANGE_FAILED"

// Kind is the auth kind of a provider whose tokens come from a token exchange.
const Kind = "token-exchange"

// Subject and actor choices.
const (
	SubjectCaller     = "caller"
	SubjectConnection = "connection"
	ActorGateway      = "gateway"
	ActorNone         = "none"
)

// CacheSize bounds the cached exchanged tokens; refreshSkew is how long before its expiry
// a cached token is exchanged again.
const (
	CacheSize   = 4096
	refreshSkew = 30 * time.Second
)

// Config is the file --token-exchange names: the providers whose calls carry an exchanged
// token (docs/identity.md, "Tokens for downstream services").
type Config struct {
	Providers []Provider `json:"providers"`
}

// Provider is one provider: the origin of its URL and how its tokens are obtained.
type Provider struct {
	URL  string `json:"url"`
	Auth Auth   `json:"auth"`
}

// Auth is {kind: "token-exchange", ...}.
type Auth struct {
	Kind          string `json:"kind"`
	TokenEndpoint string `json:"tokenEndpoint"`
	ClientID      string `json:"clientId"`
	// ClientSecretFile holds the gateway's client secret at the authorization server.
	ClientSecretFile string   `json:"clientSecretFile"`
	Audience         string   `json:"audience,omitempty"`
	Resource         string   `json:"resource,omitempty"`
	Scopes           []string `json:"scopes,omitempty"`
	Subject          string   `json:"subject"`
	Actor            string   `json:"actor"`
}

// Load reads and checks the config at path; checkURL is the egress policy's check of a URL
// that receives a credential ("" when allowed). Every problem names the file and the field.
func Load(path string, checkURL func(raw string) string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("token exchange config: %w", err)
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("token exchange config %s: %w", path, err)
	}
	for i, p := range c.Providers {
		if err := p.check(checkURL); err != nil {
			return Config{}, fmt.Errorf("token exchange config %s: providers[%d]: %w", path, i, err)
		}
	}
	return c, nil
}

func (p Provider) check(checkURL func(string) string) error {
	a := p.Auth
	switch {
	case p.URL == "" || !strings.Contains(runner.Audience(p.URL), "://") || strings.HasSuffix(runner.Audience(p.URL), "invalid"):
		return fmt.Errorf("url %q: want the provider's absolute URL", p.URL)
	case a.Kind != Kind:
		return fmt.Errorf("auth.kind %q: want %q", a.Kind, Kind)
	case a.ClientID == "" || a.ClientSecretFile == "":
		return errors.New("auth.clientId and auth.clientSecretFile are required: the gateway authenticates as its own client")
	case a.Subject == SubjectConnection:
		return errors.New(`auth.subject "connection": connections are not built yet; use "caller"`)
	case a.Subject != SubjectCaller:
		return fmt.Errorf(`auth.subject %q: want "caller"`, a.Subject)
	case a.Actor != ActorGateway && a.Actor != ActorNone:
		return fmt.Errorf(`auth.actor %q: want "gateway" or "none"`, a.Actor)
	}
	// The caller's token is sent there: the egress policy decides as for a credential's URL
	// (https, or plain http to an allowed loopback address only).
	if problem := checkURL(a.TokenEndpoint); problem != "" {
		return fmt.Errorf("auth.tokenEndpoint %q: %s", a.TokenEndpoint, problem)
	}
	if _, err := os.ReadFile(a.ClientSecretFile); err != nil {
		return fmt.Errorf("auth.clientSecretFile: %w", err)
	}
	return nil
}

// Source is the runner's token source: an exchanged token for a configured provider, the
// gateway's own service token for every other.
type Source struct {
	own       runner.TokenSource
	providers map[string]*provider // by audience (runner.Audience of the URL)
	cache     *bounded.Map[key, cached]
	flight    singleflight.Group
	now       func() time.Time
}

type provider struct {
	auth      Auth
	exchanger tokenexchange.TokenExchanger
}

type key struct {
	org, subject, actor, audience, resource, scopes string
}

type cached struct {
	token   string
	refresh time.Time
}

// New is the source over c, the gateway's own token source and client (egress-checked).
func New(ctx context.Context, c Config, own runner.TokenSource, client *http.Client) (*Source, error) {
	if own == nil {
		return nil, errors.New("token exchange: the gateway has no token source of its own")
	}
	s := &Source{own: own, providers: map[string]*provider{}, cache: bounded.New[key, cached](CacheSize), now: time.Now}
	for _, p := range c.Providers {
		secret, err := os.ReadFile(p.Auth.ClientSecretFile)
		if err != nil {
			return nil, fmt.Errorf("token exchange: %s: %w", p.URL, err)
		}
		te, err := tokenexchange.NewTokenExchangerClientCredentials(ctx, p.Auth.TokenEndpoint, p.Auth.ClientID,
			strings.TrimSpace(string(secret)), tokenexchange.WithHTTPClient(client),
			tokenexchange.WithStaticTokenEndpoint(p.Auth.TokenEndpoint, p.Auth.TokenEndpoint))
		if err != nil {
			return nil, fmt.Errorf("token exchange: %s: %w", p.URL, err)
		}
		s.providers[runner.Audience(p.URL)] = &provider{auth: p.Auth, exchanger: te}
	}
	return s, nil
}

// Token implements runner.TokenSource.
func (s *Source) Token(ctx context.Context, audience string) (string, error) {
	p, ok := s.providers[audience]
	if !ok {
		return s.own.Token(ctx, audience)
	}
	ec, ok := identity.CallerOf(ctx)
	if !ok {
		return "", failed("", "the call has no verified caller whose token could be exchanged")
	}
	principal := ec.Principal()
	k := key{org: ec.Org, subject: principal.Ref, audience: audience, resource: p.auth.Resource,
		scopes: strings.Join(p.auth.Scopes, " ")}
	if ec.Delegation != nil {
		k.actor = strings.Join(ec.Delegation.Actors, ">")
	}
	now := s.now()
	if c, ok := s.cache.Get(k, func(c cached) bool { return now.Before(c.refresh) }); ok {
		return c.token, nil
	}
	subject, ok := identity.SubjectTokenOf(ctx)
	if !ok {
		return "", failed("", "no inbound token to exchange: a call run outside its own request (a held call, once approved) cannot act with its caller's token")
	}
	v, err, _ := s.flight.Do(fmt.Sprintf("%q", k), func() (any, error) {
		// A flight that ended just before this one began has cached its token.
		if c, ok := s.cache.Get(k, func(c cached) bool { return s.now().Before(c.refresh) }); ok {
			return c.token, nil
		}
		return s.exchange(ctx, p, k, subject)
	})
	if err != nil {
		return "", err
	}
	return v.(string), nil
}

func (s *Source) exchange(ctx context.Context, p *provider, k key, subject string) (string, error) {
	var actor string
	var actorType oidc.TokenType
	if p.auth.Actor == ActorGateway {
		tok, err := s.own.Token(ctx, runner.Audience(p.auth.TokenEndpoint))
		if err != nil {
			return "", failed("", "the gateway could not obtain its own token to present as the actor")
		}
		actor, actorType = tok, oidc.AccessTokenType
	}
	var resource, audience []string
	if p.auth.Resource != "" {
		resource = []string{p.auth.Resource}
	}
	if p.auth.Audience != "" {
		audience = []string{p.auth.Audience}
	}
	started := s.now()
	resp, err := tokenexchange.ExchangeToken(ctx, p.exchanger, subject, oidc.AccessTokenType, actor, actorType,
		resource, audience, p.auth.Scopes, oidc.AccessTokenType)
	if err != nil {
		return "", failed(errorCode(err), "the authorization server refused the exchange")
	}
	if resp.AccessToken == "" {
		return "", failed("", "the authorization server's answer holds no access_token")
	}
	life := time.Duration(resp.ExpiresIn) * time.Second
	if resp.ExpiresIn == 0 {
		life = time.Minute // no expires_in: reuse it briefly, never for long
	}
	if refresh := started.Add(life - refreshSkew); refresh.After(started) {
		s.cache.Put(k, cached{token: resp.AccessToken, refresh: refresh})
	}
	return resp.AccessToken, nil
}

// errorCode is the authorization server's RFC 6749 error code, "" when the exchange failed
// otherwise (unreachable, not JSON). Its description is not passed on: it may quote a token.
func errorCode(err error) string {
	var oe *oidc.Error
	if errors.As(err, &oe) && validCode(string(oe.ErrorType)) {
		return string(oe.ErrorType)
	}
	return ""
}

// validCode: an RFC 6749 error code is a short word of ASCII letters and '_'.
func validCode(s string) bool {
	return s != "" && len(s) <= 64 && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	})
}

// failed is the typed refusal: not run, with the authorization server's error code.
func failed(code, msg string) *fault.Error {
	if code != "" {
		msg += " (" + code + ")"
	}
	e := fault.New(fault.Provider, CodeFailed, "token exchange failed: %s; the provider was not called", msg)
	e.NotRun = true
	return e
}

// Configured lists the audiences of the configured providers, sorted.
func (s *Source) Configured() []string {
	out := make([]string, 0, len(s.providers))
	for a := range s.providers {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}
