// Package txntoken signs the trusted context of a critical operation: a short-lived JWT
// shaped as an OAuth Transaction Token (draft-ietf-oauth-transaction-tokens-10) that the
// gateway sends a provider in the Txn-Token header with every call of a capability that
// declares trustedContextProjection {profile: critical-operation-v1, delivery:
// server-envelope}. Its keys are the deployment's (deploykeys: txn-token-signing), Ed25519
// keys derived from their 32-byte seeds, published in the gateway's JWKS.
package txntoken

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/xemahq/xema/internal/identity"
)

// Type is the JOSE typ of a Txn-Token; Header is the request header carrying it.
const (
	Type   = "txntoken+jwt"
	Header = "Txn-Token"
	// Lifetime is how long a Txn-Token is good for: one call, with room for clock drift.
	Lifetime = 60 * time.Second
	// Profile and Delivery are the declaration that asks for a Txn-Token.
	Profile  = "critical-operation-v1"
	Delivery = "server-envelope"
)

// Signer signs Txn-Tokens with the current key and publishes it with the retired ones.
type Signer struct {
	issuer string
	key    ed25519.PrivateKey
	kid    string
	jwks   []byte
}

// New is a signer named issuer (the gateway: req_wl and iss) over seeds, the current key's
// first, then the retired ones still published.
func New(issuer string, seeds [][]byte) (*Signer, error) {
	if len(seeds) == 0 {
		return nil, errors.New("txn-token: no signing key")
	}
	type jwk struct {
		Kty string `json:"kty"`
		Crv string `json:"crv"`
		X   string `json:"x"`
		Kid string `json:"kid"`
		Use string `json:"use"`
		Alg string `json:"alg"`
	}
	var keys []jwk
	s := &Signer{issuer: issuer}
	for i, seed := range seeds {
		if len(seed) != ed25519.SeedSize {
			return nil, fmt.Errorf("txn-token: signing key %d holds %d bytes, want %d", i, len(seed), ed25519.SeedSize)
		}
		priv := ed25519.NewKeyFromSeed(seed)
		pub := priv.Public().(ed25519.PublicKey)
		kid := KeyID(pub)
		if i == 0 {
			s.key, s.kid = priv, kid
		}
		keys = append(keys, jwk{Kty: "OKP", Crv: "Ed25519", X: base64.RawURLEncoding.EncodeToString(pub), Kid: kid, Use: "sig", Alg: "EdDSA"})
	}
	s.jwks, _ = json.Marshal(map[string]any{"keys": keys}) // strings only: always encodes
	return s, nil
}

// KeyID names a public key: the first 16 bytes of its SHA-256, base64url.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "txn-" + base64.RawURLEncoding.EncodeToString(sum[:16])
}

// Context is the trusted context (tctx) of one call.
type Context struct {
	Org         string `json:"org"`
	Environment string `json:"environment"`
	// InputHash is "sha256:" and the hex SHA-256 of the input the provider receives.
	InputHash string    `json:"inputHash"`
	RiskTier  string    `json:"riskTier"`
	Approval  *Approval `json:"approval,omitempty"`
}

// Approval is the approval that released a held call.
type Approval struct {
	ID string `json:"id"`
	By string `json:"by"`
	At int64  `json:"at"`
}

// Call is what one Txn-Token asserts.
type Call struct {
	AuditID  string
	Subject  string
	Audience string
	Ref      string
	Context  Context
	// Actors is the act chain of a delegated call, outermost first.
	Actors []string
}

// InputHash is the tctx input hash of raw: what the provider computes over the body it got.
func InputHash(raw []byte) string {
	sum := sha256.Sum256(raw)
	return fmt.Sprintf("sha256:%x", sum)
}

// Sign mints the Txn-Token of c, good for Lifetime from now.
func (s *Signer) Sign(c Call, now time.Time) (string, error) {
	claims := jwt.MapClaims{
		"iss": s.issuer, "aud": c.Audience, "sub": c.Subject, "txn": c.AuditID,
		"iat": now.Unix(), "exp": now.Add(Lifetime).Unix(),
		"scope": c.Ref, "req_wl": s.issuer, "tctx": c.Context,
	}
	if len(c.Actors) > 0 {
		act := map[string]any{"sub": c.Actors[len(c.Actors)-1]}
		for i := len(c.Actors) - 2; i >= 0; i-- {
			act = map[string]any{"sub": c.Actors[i], "act": act}
		}
		claims["act"] = act
	}
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	t.Header["typ"] = Type
	t.Header["kid"] = s.kid
	out, err := t.SignedString(s.key)
	if err != nil {
		return "", fmt.Errorf("txn-token: sign: %w", err)
	}
	return out, nil
}

// JWKS is the JWK Set of the signer's keys (public halves only).
func (s *Signer) JWKS() []byte { return s.jwks }

// Handler serves the JWK Set of the gateway at /.well-known/jwks.json: the signer's keys and,
// when the gateway is also its development issuer, that issuer's (issuerJWKS, or nil).
func Handler(s *Signer, issuerJWKS json.RawMessage) (http.Handler, error) {
	var set, own struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if issuerJWKS != nil {
		if err := json.Unmarshal(issuerJWKS, &set); err != nil {
			return nil, fmt.Errorf("jwks: the issuer's key set: %w", err)
		}
	}
	if err := json.Unmarshal(s.jwks, &own); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	set.Keys = append(set.Keys, own.Keys...)
	body, err := json.Marshal(set)
	if err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	return identity.ServeJWKS(body), nil
}
