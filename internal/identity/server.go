package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/oauth"
	"github.com/xemahq/xema/internal/secretbox"
)

// JWKSPath is where the gateway serves the development issuer's keys.
const JWKSPath = "/.well-known/jwks.json"

// EnvIdentityURL is the identity service URL the gateway registers with.
const EnvIdentityURL = "XEMA_IDENTITY_URL"

// ServerConfig is what `xema serve` passes: an external issuer, or none for the development
// issuer under DataDir.
type ServerConfig struct {
	DataDir string
	// Issuer is the external OIDC issuer; "" runs the development issuer.
	Issuer   string
	Audience string
	// JWKSURL defaults to the jwks_uri of the issuer's OpenID discovery document.
	JWKSURL string
	// ClaimMapping is "default", "keycloak" or a JSON file (docs/identity.md).
	ClaimMapping string
	// DefaultOrg is the org of an external issuer's token that names none (--default-org);
	// "" refuses such tokens. The development issuer's tokens default to DefaultOrg.
	DefaultOrg string
	// Algorithms defaults to RS256 and ES256.
	Algorithms []string
	// Leeway for exp, nbf and iat; 0 means DefaultLeeway, at most MaxLeeway.
	Leeway time.Duration
	// MaxTokenTTL is the longest token lifetime accepted; 0 means DefaultMaxTokenTTL.
	MaxTokenTTL time.Duration
	// IdentityURL ($XEMA_IDENTITY_URL) with BootstrapToken ($IDENTITY_API_INTERNAL_TOKEN)
	// registers the gateway for outbound client credentials (oauth.Bootstrap), sealed under
	// the keyring of SecretKeys.
	IdentityURL, BootstrapToken string
	SecretKeys                  secretbox.Source
}

// TokenSource mints the gateway's own outbound bearer token for one audience (a provider's,
// never the gateway's own API).
type TokenSource interface {
	Token(ctx context.Context, audience string) (string, error)
}

// ServerIdentity is the gateway's identity: the inbound Verifier, the outbound token source and
// the handlers to mount.
type ServerIdentity struct {
	*Verifier
	tokens TokenSource
	mounts map[string]http.Handler
	// issuerJWKS is the development issuer's key set; nil with an external issuer.
	issuerJWKS json.RawMessage
	cancel     context.CancelFunc
}

// NewServerIdentity sets up inbound verification and outbound tokens. Any failure is fatal
// for the server: it must not start unable to tell callers apart.
func NewServerIdentity(ctx context.Context, cfg ServerConfig) (*ServerIdentity, error) {
	mapping, err := LoadMapping(cfg.ClaimMapping)
	if err != nil {
		return nil, err
	}
	// The verifier's JWKS refresh runs until Close, not until the start-up ctx ends.
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	si := &ServerIdentity{cancel: cancel, mounts: map[string]http.Handler{}}
	var vcfg Config
	var dev *Issuer
	if cfg.Issuer == "" {
		if dev, err = OpenIssuer(cfg.DataDir, ""); err != nil {
			cancel()
			return nil, err
		}
		vcfg = dev.VerifierConfig()
		si.mounts[JWKSPath] = dev.JWKSHandler()
		si.issuerJWKS = dev.JWKS()
	} else {
		if cfg.DefaultOrg != "" {
			mapping.Org.Default = cfg.DefaultOrg
		}
		vcfg = Config{Issuer: cfg.Issuer, Audience: cfg.Audience, JWKSURL: cfg.JWKSURL, Algorithms: cfg.Algorithms, Mapping: &mapping}
		if len(vcfg.Algorithms) == 0 {
			vcfg.Algorithms = []string{"RS256", "ES256"}
		}
		if vcfg.JWKSURL == "" {
			if vcfg.JWKSURL, err = discoverJWKS(ctx, cfg.Issuer); err != nil {
				cancel()
				return nil, err
			}
		}
	}
	vcfg.Leeway = cfg.Leeway
	vcfg.MaxTokenTTL = cfg.MaxTokenTTL
	if si.tokens, err = outboundTokens(ctx, cfg, dev); err != nil {
		cancel()
		return nil, err
	}
	if c, ok := si.tokens.(interface{ ClientID() string }); ok && c.ClientID() != "" {
		vcfg.RefusedClients = append(vcfg.RefusedClients, c.ClientID())
	}
	if si.Verifier, err = NewVerifier(life, vcfg); err != nil {
		cancel()
		return nil, err
	}
	return si, nil
}

// ServiceTokens is the outbound token source for non-best-effort calls.
func (s *ServerIdentity) ServiceTokens() TokenSource { return s.tokens }

// Mounts are the handlers the server serves by path (the dev issuer's JWKS).
func (s *ServerIdentity) Mounts() map[string]http.Handler { return s.mounts }

// IssuerJWKS is the development issuer's key set, which the gateway's JWKS also serves; nil
// with an external issuer.
func (s *ServerIdentity) IssuerJWKS() json.RawMessage { return s.issuerJWKS }

// Close stops the background JWKS refresh.
func (s *ServerIdentity) Close() { s.cancel() }

// outboundTokens picks the outbound identity: a registration with the identity service
// (stored or new), else in development the dev issuer's own service token, else none (every
// outbound call then fails with oauth.ErrNoToken).
func outboundTokens(ctx context.Context, cfg ServerConfig, dev *Issuer) (TokenSource, error) {
	identityURL := cfg.IdentityURL
	_, statErr := os.Stat(oauth.RegistrationFile(cfg.DataDir))
	if identityURL != "" || statErr == nil {
		kr, err := cfg.SecretKeys.Keyring()
		if err != nil {
			return nil, fmt.Errorf("outbound identity: %w", err)
		}
		reg, err := oauth.Bootstrap(ctx, oauth.BootstrapConfig{
			IdentityURL: identityURL, BootstrapToken: cfg.BootstrapToken, DataDir: cfg.DataDir, Keyring: kr,
		})
		if err != nil {
			return nil, fmt.Errorf("outbound identity: %w", err)
		}
		return reg.AudienceTokens()
	}
	if dev != nil {
		return NewDevServiceTokens(dev), nil
	}
	return noTokens{}, nil
}

// DevServiceTokenTTL is the lifetime of a development outbound token; one is minted per
// audience and reused until DevServiceTokenRefresh of it has passed.
const (
	DevServiceTokenTTL     = 5 * time.Minute
	DevServiceTokenRefresh = 0.8
	maxDevAudiences        = 1024
)

// DevServiceTokens signs the gateway's own short-lived outbound tokens with the development
// issuer: subject service:xema-gateway, the provider's audience, claim xema_use "outbound"
// (so no verifier accepts it back). Tokens are cached per audience.
type DevServiceTokens struct {
	iss *Issuer
	now func() time.Time
	mu  sync.Mutex
	by  map[string]cachedToken
}

type cachedToken struct {
	token     string
	refreshAt time.Time
}

// NewDevServiceTokens returns the development outbound token source of iss.
func NewDevServiceTokens(iss *Issuer) *DevServiceTokens {
	return &DevServiceTokens{iss: iss, now: time.Now, by: map[string]cachedToken{}}
}

// Token returns the cached token for audience, or mints one.
func (d *DevServiceTokens) Token(_ context.Context, audience string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	if c, ok := d.by[audience]; ok && now.Before(c.refreshAt) {
		return c.token, nil
	}
	tok, err := d.iss.Mint(DevClaims{Subject: "service:xema-gateway", Environment: "service", TTL: DevServiceTokenTTL,
		Audience: audience, Outbound: true})
	if err != nil {
		return "", &oauth.NoTokenError{Detail: err.Error()}
	}
	if len(d.by) >= maxDevAudiences {
		for k, c := range d.by {
			if !now.Before(c.refreshAt) {
				delete(d.by, k)
			}
		}
		if len(d.by) >= maxDevAudiences {
			d.by = map[string]cachedToken{}
		}
	}
	d.by[audience] = cachedToken{token: tok, refreshAt: now.Add(time.Duration(float64(DevServiceTokenTTL) * DevServiceTokenRefresh))}
	return tok, nil
}

type noTokens struct{}

func (noTokens) Token(context.Context, string) (string, error) {
	return "", &oauth.NoTokenError{Detail: "no outbound identity configured (set " + EnvIdentityURL + " and " + oauth.EnvBootstrapToken + ")"}
}

// discoverJWKS reads jwks_uri from the issuer's OpenID discovery document.
func discoverJWKS(ctx context.Context, issuer string) (string, error) {
	d, err := Discover(ctx, issuer)
	if err != nil {
		return "", err
	}
	if d.JWKSURI == "" {
		return "", errors.New("issuer discovery: no jwks_uri")
	}
	return d.JWKSURI, nil
}

// Discovery is what the gateway reads of an issuer's OpenID discovery document.
type Discovery struct {
	Issuer                string `json:"issuer"`
	JWKSURI               string `json:"jwks_uri"`
	AuthorizationEndpoint string `json:"authorization_endpoint"`
	TokenEndpoint         string `json:"token_endpoint"`
}

// Discover fetches issuer's /.well-known/openid-configuration; the document must name issuer
// exactly.
func Discover(ctx context.Context, issuer string) (Discovery, error) {
	u := strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration"
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Discovery{}, fmt.Errorf("issuer discovery %s: %w", u, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Discovery{}, fmt.Errorf("issuer discovery: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Discovery{}, fmt.Errorf("issuer discovery %s: status %d", u, resp.StatusCode)
	}
	var doc Discovery
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&doc); err != nil {
		return Discovery{}, fmt.Errorf("issuer discovery %s: %w", u, err)
	}
	if doc.Issuer != issuer {
		return Discovery{}, fmt.Errorf("issuer discovery %s: document names issuer %q, not %q", u, doc.Issuer, issuer)
	}
	return doc, nil
}
