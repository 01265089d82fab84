// Package oauth holds the gateway's outbound identity: one OAuth2 client_credentials token
// source for every non-best-effort outbound call, and the bootstrap that registers the gateway
// with the identity service to obtain its client credentials.
package oauth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
	"golang.org/x/sync/singleflight"
)

// ErrNoToken is matched (errors.Is) when no token can be minted. The concrete error is a
// *NoTokenError. There is no static fallback: the outbound call must fail.
var ErrNoToken = errors.New("no outbound token")

// NoTokenError says why no token could be minted. It never holds the secret or a token.
type NoTokenError struct {
	Status int    // HTTP status of the token endpoint, 0 if it was not reached
	Code   string // OAuth2 error code (e.g. "invalid_client"), "" if none
	Detail string
}

func (e *NoTokenError) Error() string {
	var b strings.Builder
	b.WriteString(ErrNoToken.Error())
	if e.Status != 0 {
		fmt.Fprintf(&b, ": token endpoint answered %d", e.Status)
	}
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrNoToken) true.
func (e *NoTokenError) Is(target error) bool { return target == ErrNoToken }

// Refresh timing: a token is replaced at refreshFraction ± refreshJitter of its lifetime (so
// replicas do not refresh together), and never used within expirySkew of its expiry.
const (
	refreshFraction = 0.8
	refreshJitter   = 0.05
	expirySkew      = 10 * time.Second
	// defaultLifetime applies when the token endpoint declares no expires_in.
	defaultLifetime = time.Minute
	maxBody         = 1 << 20
)

// Config configures a client_credentials token source.
type Config struct {
	TokenURL     string
	ClientID     string
	ClientSecret string
	Scopes       []string
	// Audience, if set, is sent as the "audience" parameter (hydra, Auth0; Keycloak ignores it
	// and uses an audience mapper instead).
	Audience   string
	HTTPClient *http.Client
}

// TokenSource mints and caches client_credentials access tokens. Safe for concurrent use.
type TokenSource struct {
	cfg    Config
	client *http.Client
	now    func() time.Time
	flight singleflight.Group

	mu        sync.Mutex
	token     string
	refreshAt time.Time
	expiresAt time.Time
}

// NewTokenSource checks the configuration; no request is made until the first Token.
func NewTokenSource(cfg Config) (*TokenSource, error) {
	u, err := url.Parse(cfg.TokenURL)
	if err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && isLoopback(u.Hostname()))) {
		return nil, fmt.Errorf("oauth: token URL %q must be https (http only to a loopback host)", cfg.TokenURL)
	}
	if cfg.ClientID == "" || cfg.ClientSecret == "" {
		return nil, errors.New("oauth: client id and client secret are required")
	}
	client := cfg.HTTPClient
	if client == nil {
		// A token endpoint's redirect is not followed: the client secret is never re-sent.
		client = &http.Client{Timeout: 10 * time.Second, CheckRedirect: noRedirect}
	}
	return &TokenSource{cfg: cfg, client: client, now: time.Now}, nil
}

func noRedirect(*http.Request, []*http.Request) error {
	return errors.New("oauth: redirect not followed")
}

func isLoopback(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}

// Token returns a valid access token: the cached one, or a fresh one when the cached one has
// reached its refresh point. Concurrent callers share one request to the token endpoint. When
// a refresh fails but the cached token is still valid, that token is returned (and the
// failure logged); otherwise the error is a *NoTokenError.
func (s *TokenSource) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	tok, refreshAt, expiresAt := s.token, s.refreshAt, s.expiresAt
	s.mu.Unlock()
	now := s.now()
	if tok != "" && now.Before(refreshAt) {
		return tok, nil
	}
	ch := s.flight.DoChan("token", func() (any, error) {
		// The request outlives one caller's cancellation: others wait on the same flight.
		// A caller that read the cache before the previous flight landed must not start a
		// second request.
		s.mu.Lock()
		cached, fresh := s.token, s.now().Before(s.refreshAt)
		s.mu.Unlock()
		if cached != "" && fresh {
			return cached, nil
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return s.fetch(rctx)
	})
	select {
	case <-ctx.Done():
		return "", &NoTokenError{Detail: "waiting for the token endpoint: " + ctx.Err().Error()}
	case res := <-ch:
		if res.Err == nil {
			return res.Val.(string), nil
		}
		if tok != "" && now.Before(expiresAt) {
			slog.WarnContext(ctx, "outbound token refresh failed; using the cached token until it expires", "error", res.Err)
			return tok, nil
		}
		return "", res.Err
	}
}

var errorCode = regexp.MustCompile(`^[a-z_]{1,64}$`)

// fetch asks the token endpoint for a token (RFC 6749 §4.4, through golang.org/x/oauth2)
// and caches it. Errors keep only the status and the OAuth2 error code: the library's own
// error text quotes the response body.
func (s *TokenSource) fetch(ctx context.Context) (string, error) {
	cc := clientcredentials.Config{ClientID: s.cfg.ClientID, ClientSecret: s.cfg.ClientSecret,
		TokenURL: s.cfg.TokenURL, Scopes: s.cfg.Scopes, AuthStyle: oauth2.AuthStyleInHeader}
	if s.cfg.Audience != "" {
		cc.EndpointParams = url.Values{"audience": {s.cfg.Audience}}
	}
	sent := s.now()
	tok, err := cc.Token(context.WithValue(ctx, oauth2.HTTPClient, s.client))
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.Response != nil {
			code := ""
			if errorCode.MatchString(re.ErrorCode) {
				code = re.ErrorCode
			}
			if re.Response.StatusCode == http.StatusOK {
				return "", &NoTokenError{Status: http.StatusOK, Detail: "token response has no usable access_token"}
			}
			return "", &NoTokenError{Status: re.Response.StatusCode, Code: code}
		}
		if ctx.Err() != nil {
			return "", &NoTokenError{Detail: "token endpoint did not answer: " + ctx.Err().Error()}
		}
		return "", &NoTokenError{Detail: "token endpoint unreachable or its answer unreadable"}
	}
	if !strings.EqualFold(tok.Type(), "bearer") {
		return "", &NoTokenError{Status: http.StatusOK, Detail: "token_type is not bearer"}
	}
	lifetime := defaultLifetime
	if !tok.Expiry.IsZero() {
		lifetime = tok.Expiry.Sub(sent)
	}
	fraction := refreshFraction + (rand.Float64()*2-1)*refreshJitter
	s.mu.Lock()
	s.token = tok.AccessToken
	s.refreshAt = sent.Add(time.Duration(float64(lifetime) * fraction))
	s.expiresAt = sent.Add(lifetime - expirySkew)
	if s.refreshAt.After(s.expiresAt) {
		s.refreshAt = s.expiresAt
	}
	s.mu.Unlock()
	return tok.AccessToken, nil
}
