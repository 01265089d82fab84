package oauth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/atomicfile"
	"github.com/xemahq/xema/internal/secretbox"
)

// RegistrationPath is where the identity service takes registrations (relative to its URL).
const RegistrationPath = "/internal/v1/service-registrations"

// EnvBootstrapToken holds the one-time bootstrap secret of the identity service.
const EnvBootstrapToken = "IDENTITY_API_INTERNAL_TOKEN"

// secretAAD binds the sealed client secret to its purpose.
var secretAAD = []byte("xema/identity/registration:client_secret")

// RegistrationRequest is what the gateway sends (schemas/identity-registration.request.json).
type RegistrationRequest struct {
	Service    string   `json:"service"`
	Instance   string   `json:"instance,omitempty"`
	GrantTypes []string `json:"grant_types"`
	Scopes     []string `json:"scopes,omitempty"`
}

// Registration is the identity service's answer (schemas/identity-registration.response.json):
// the gateway's own OAuth2 client.
type Registration struct {
	ClientID      string `json:"client_id"`
	ClientSecret  string `json:"client_secret"`
	TokenEndpoint string `json:"token_endpoint"`
}

// stored is registration.json: the secret only ever sealed.
type stored struct {
	ClientID           string    `json:"client_id"`
	ClientSecretSealed string    `json:"client_secret_sealed"`
	TokenEndpoint      string    `json:"token_endpoint"`
	IdentityURL        string    `json:"identity_url"`
	RegisteredAt       time.Time `json:"registered_at"`
}

// BootstrapConfig configures the registration at start.
type BootstrapConfig struct {
	// IdentityURL is the identity service's base URL.
	IdentityURL string
	// BootstrapToken is IDENTITY_API_INTERNAL_TOKEN; used for the registration request only.
	BootstrapToken string
	// DataDir holds identity/registration.json.
	DataDir string
	Keyring *secretbox.Keyring
	Request RegistrationRequest
	// HTTPClient defaults to a client with a 15s timeout.
	HTTPClient *http.Client
}

// RegistrationFile is where Bootstrap keeps the registration under the data dir.
func RegistrationFile(dataDir string) string {
	return filepath.Join(dataDir, "identity", "registration.json")
}

// Bootstrap returns the gateway's client credentials: the stored registration when there is
// one (a restart never registers again), otherwise a new registration with the identity
// service, stored with its secret sealed before it is returned.
func Bootstrap(ctx context.Context, cfg BootstrapConfig) (Registration, error) {
	if cfg.Keyring == nil {
		return Registration{}, errors.New("bootstrap: a secretbox keyring is required to store the client secret")
	}
	path := RegistrationFile(cfg.DataDir)
	reg, err := load(path, cfg.Keyring)
	switch {
	case err == nil:
		return reg, nil
	case !errors.Is(err, os.ErrNotExist):
		return Registration{}, err
	}
	if cfg.IdentityURL == "" || cfg.BootstrapToken == "" {
		return Registration{}, fmt.Errorf("bootstrap: no stored registration at %s and no identity URL and %s to register with", path, EnvBootstrapToken)
	}
	reg, err = register(ctx, cfg)
	if err != nil {
		return Registration{}, err
	}
	if err := save(path, cfg, reg); err != nil {
		return Registration{}, err
	}
	return reg, nil
}

// TokenSource is the client_credentials token source of this registration.
func (r Registration) TokenSource(scopes ...string) (*TokenSource, error) {
	return NewTokenSource(Config{TokenURL: r.TokenEndpoint, ClientID: r.ClientID, ClientSecret: r.ClientSecret, Scopes: scopes})
}

func register(ctx context.Context, cfg BootstrapConfig) (Registration, error) {
	base, err := url.Parse(cfg.IdentityURL)
	if err != nil || !secureURL(base) {
		return Registration{}, fmt.Errorf("bootstrap: identity URL %q must be https (http only to a loopback host)", cfg.IdentityURL)
	}
	req := cfg.Request
	if req.Service == "" {
		req.Service = "xema-gateway"
	}
	if len(req.GrantTypes) == 0 {
		req.GrantTypes = []string{"client_credentials"}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Registration{}, fmt.Errorf("bootstrap: %w", err)
	}
	endpoint := strings.TrimSuffix(base.String(), "/") + RegistrationPath
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return Registration{}, fmt.Errorf("bootstrap: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+cfg.BootstrapToken)
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 15 * time.Second, CheckRedirect: noRedirect}
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return Registration{}, fmt.Errorf("bootstrap: identity service unreachable: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return Registration{}, fmt.Errorf("bootstrap: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		// The body is not echoed: it may hold credentials meant for someone else.
		return Registration{}, fmt.Errorf("bootstrap: identity service answered %d to the registration", resp.StatusCode)
	}
	var reg Registration
	if err := json.Unmarshal(raw, &reg); err != nil {
		return Registration{}, fmt.Errorf("bootstrap: registration answer is not the documented JSON object")
	}
	if err := reg.validate(); err != nil {
		return Registration{}, fmt.Errorf("bootstrap: registration answer: %w", err)
	}
	return reg, nil
}

func (r Registration) validate() error {
	switch {
	case r.ClientID == "":
		return errors.New("client_id is missing")
	case r.ClientSecret == "":
		return errors.New("client_secret is missing")
	}
	u, err := url.Parse(r.TokenEndpoint)
	if err != nil || !secureURL(u) {
		return fmt.Errorf("token_endpoint %q must be an https URL (http only to a loopback host)", r.TokenEndpoint)
	}
	return nil
}

func secureURL(u *url.URL) bool {
	return u.Host != "" && (u.Scheme == "https" || (u.Scheme == "http" && isLoopback(u.Hostname())))
}

func save(path string, cfg BootstrapConfig, reg Registration) error {
	sealed, err := cfg.Keyring.Seal([]byte(reg.ClientSecret), secretAAD)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	b, err := json.MarshalIndent(stored{
		ClientID: reg.ClientID, ClientSecretSealed: sealed, TokenEndpoint: reg.TokenEndpoint,
		IdentityURL: cfg.IdentityURL, RegisteredAt: time.Now().UTC(),
	}, "", "  ")
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("bootstrap: store registration: %w", err)
	}
	return nil
}

func load(path string, kr *secretbox.Keyring) (Registration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Registration{}, err
	}
	var s stored
	if err := json.Unmarshal(b, &s); err != nil {
		return Registration{}, fmt.Errorf("bootstrap: %s is not valid JSON: %w", path, err)
	}
	secret, err := kr.Open(s.ClientSecretSealed, secretAAD)
	if err != nil {
		return Registration{}, fmt.Errorf("bootstrap: stored client secret in %s: %w", path, err)
	}
	reg := Registration{ClientID: s.ClientID, ClientSecret: string(secret), TokenEndpoint: s.TokenEndpoint}
	if err := reg.validate(); err != nil {
		return Registration{}, fmt.Errorf("bootstrap: %s: %w", path, err)
	}
	return reg, nil
}

// String redacts the secret so a registration printed by mistake does not leak it.
func (r Registration) String() string {
	return fmt.Sprintf("{client_id:%s token_endpoint:%s client_secret:[redacted]}", r.ClientID, r.TokenEndpoint)
}

// GoString redacts the secret for %#v as well.
func (r Registration) GoString() string { return r.String() }
