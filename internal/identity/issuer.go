package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/xemahq/xema/internal/secretbox"
)

// DevAudience is the audience of development tokens.
const DevAudience = "xema"

// MaxDevTTL bounds the lifetime of a development token.
const MaxDevTTL = 24 * time.Hour

const devKeyFile = "signing-key.pem"

// Issuer is the development issuer: an ES256 key under <data-dir>/issuer/, its JWKS, and a
// Mint for tokens the gateway with that data dir accepts through the ordinary Verifier.
type Issuer struct {
	name string
	key  *ecdsa.PrivateKey
	kid  string
	jwks []byte
}

// OpenIssuer loads the issuer key under dataDir, creating it on first use. name is the iss
// claim; "" means "xema-dev:<absolute data dir>".
func OpenIssuer(dataDir, name string) (*Issuer, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("dev issuer: data dir: %w", err)
	}
	if name == "" {
		name = "xema-dev:" + abs
	}
	dir := filepath.Join(abs, "issuer")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("dev issuer: %w", err)
	}
	key, err := loadOrCreateKey(filepath.Join(dir, devKeyFile))
	if err != nil {
		return nil, fmt.Errorf("dev issuer: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("dev issuer: %w", err)
	}
	sum := sha256.Sum256(der)
	kid := base64.RawURLEncoding.EncodeToString(sum[:12])
	jwk, err := jwkset.NewJWKFromKey(&key.PublicKey, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{
		ALG: jwkset.AlgES256, KID: kid, USE: jwkset.UseSig,
	}})
	if err != nil {
		return nil, fmt.Errorf("dev issuer: JWK: %w", err)
	}
	jwks, err := json.Marshal(jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{jwk.Marshal()}})
	if err != nil {
		return nil, fmt.Errorf("dev issuer: JWKS: %w", err)
	}
	return &Issuer{name: name, key: key, kid: kid, jwks: jwks}, nil
}

// loadOrCreateKey reads the PEM key, or creates it so that two processes starting together
// end up with the same key (link fails if another process won).
func loadOrCreateKey(path string) (*ecdsa.PrivateKey, error) {
	key, err := readKey(path)
	if !errors.Is(err, os.ErrNotExist) {
		return key, err
	}
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".key-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := pem.Encode(tmp, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("install key: %w", err)
	}
	return readKey(path)
}

func readKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := secretbox.ReadPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("signing key %s: not a PEM PRIVATE KEY", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("signing key %s: not a P-256 ECDSA key", path)
	}
	return ec, nil
}

// Name is the iss claim of the issuer's tokens.
func (i *Issuer) Name() string { return i.name }

// KeyID is the kid of the signing key.
func (i *Issuer) KeyID() string { return i.kid }

// JWKS is the issuer's public JWK Set.
func (i *Issuer) JWKS() json.RawMessage { return json.RawMessage(i.jwks) }

// JWKSHandler serves the JWK Set (mounted at /.well-known/jwks.json).
func (i *Issuer) JWKSHandler() http.Handler { return ServeJWKS(i.jwks) }

// ServeJWKS serves the JWK Set jwks, read-only and cacheable.
func ServeJWKS(jwks []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Header().Set("Cache-Control", "public, max-age=300")
		_, _ = w.Write(jwks)
	})
}

// VerifierConfig is the Verifier configuration that accepts this issuer's tokens.
func (i *Issuer) VerifierConfig() Config {
	m := DevIssuerMapping()
	return Config{
		Issuer:     i.name,
		Audience:   DevAudience,
		LocalJWKS:  i.JWKS(),
		Algorithms: []string{"ES256"},
		Mapping:    &m,
	}
}

// DevClaims is what a development token asserts.
type DevClaims struct {
	Subject     string // "kind:name"
	Environment string
	Groups      []string
	Roles       []string
	OrgRole     string
	Org         string
	Project     string
	Session     string
	// Armed nil means armed for all (no claim); non-nil is written as given.
	Armed []string
	TTL   time.Duration
	// Audience is the aud claim; "" is DevAudience (a token for the gateway's API).
	Audience string
	// Outbound marks a token the gateway sends to a provider (claim xema_use "outbound"):
	// its audience must be a provider's, and no verifier accepts it.
	Outbound bool
	// Actors, when set, is the act chain (outermost first): the token says they act for
	// Subject. MayAct is the may_act claim: the actors Subject allows.
	Actors []string
	MayAct []string
}

// Validate checks every field, naming the first that is wrong.
func (c DevClaims) Validate() error {
	kind, name, ok := strings.Cut(c.Subject, ":")
	switch {
	case !ok || name == "":
		return fmt.Errorf("subject %q must be KIND:NAME", c.Subject)
	case !ValidSubjectKind(kind):
		return fmt.Errorf("subject kind %q must be one of %v", kind, subjectKinds)
	case strings.ContainsAny(name, " \t\r\n"):
		return fmt.Errorf("subject name %q must not contain whitespace", name)
	case c.Environment == "":
		return errors.New("environment is required")
	case c.OrgRole != "" && !ValidOrgRole(c.OrgRole):
		return fmt.Errorf("org role %q must be one of %v", c.OrgRole, orgRoles)
	case c.TTL <= 0 || c.TTL > MaxDevTTL:
		return fmt.Errorf("ttl %v must be > 0 and <= %v", c.TTL, MaxDevTTL)
	case c.Outbound && (c.Audience == "" || c.Audience == DevAudience):
		return errors.New("an outbound token needs a provider's audience, never the gateway's")
	}
	for _, list := range [][]string{c.Groups, c.Roles} {
		for _, s := range list {
			if strings.TrimSpace(s) == "" {
				return errors.New("groups and roles must not be empty strings")
			}
		}
	}
	for _, a := range append(slices.Clone(c.Actors), c.MayAct...) {
		if kind, name, ok := strings.Cut(a, ":"); !ok || !ValidSubjectKind(kind) || name == "" || strings.ContainsAny(name, " \t\r\n") {
			return fmt.Errorf("actor %q must be KIND:NAME, KIND one of %v", a, subjectKinds)
		}
	}
	if len(c.Actors) > MaxActDepth {
		return fmt.Errorf("%d actors: the act chain holds at most %d", len(c.Actors), MaxActDepth)
	}
	if c.Armed != nil && len(c.Armed) == 0 {
		return errors.New("armed is empty: omit it to arm for all, or give patterns")
	}
	return ValidateArmed(c.Armed)
}

// Mint signs a development token.
func (i *Issuer) Mint(c DevClaims) (string, error) {
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("dev token: %w", err)
	}
	now := time.Now()
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		return "", fmt.Errorf("dev token: %w", err)
	}
	aud := c.Audience
	if aud == "" {
		aud = DevAudience
	}
	claims := jwt.MapClaims{
		"iss":            i.name,
		"aud":            aud,
		"sub":            c.Subject,
		"iat":            now.Unix(),
		"nbf":            now.Unix(),
		"exp":            now.Add(c.TTL).Unix(),
		"jti":            base64.RawURLEncoding.EncodeToString(jti),
		ClaimEnvironment: c.Environment,
	}
	for k, v := range map[string]string{ClaimOrgRole: c.OrgRole, ClaimOrg: c.Org, ClaimProject: c.Project, ClaimSession: c.Session} {
		if v != "" {
			claims[k] = v
		}
	}
	if c.Outbound {
		claims[ClaimUse] = "outbound"
	}
	if len(c.Actors) > 0 {
		claims["act"] = actClaim(c.Actors)
	}
	if len(c.MayAct) > 0 {
		may := make([]any, len(c.MayAct))
		for i, a := range c.MayAct {
			may[i] = map[string]any{"sub": a}
		}
		claims["may_act"] = may
	}
	for k, v := range map[string][]string{ClaimGroups: c.Groups, ClaimRoles: c.Roles, ClaimArmed: c.Armed} {
		if v != nil {
			claims[k] = v
		}
	}
	t := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	t.Header["kid"] = i.kid
	s, err := t.SignedString(i.key)
	if err != nil {
		return "", fmt.Errorf("dev token: sign: %w", err)
	}
	return s, nil
}

// actClaim nests an act chain, outermost first, as RFC 8693 writes it.
func actClaim(actors []string) map[string]any {
	act := map[string]any{"sub": actors[len(actors)-1]}
	for i := len(actors) - 2; i >= 0; i-- {
		act = map[string]any{"sub": actors[i], "act": act}
	}
	return act
}
