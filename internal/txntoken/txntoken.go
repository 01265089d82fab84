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
	header []byte // the encoded JOSE header of the current key
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
			h, _ := json.Marshal(map[string]string{"alg": "EdDSA", "typ": Type, "kid": kid}) // strings: always encodes
			s.key, s.header = priv, base64.RawURLEncoding.AppendEncode(nil, h)
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

// claims is a Txn-Token's payload: a struct, which encodes in a fraction of a map's time.
type claims struct {
	Iss   string  `json:"iss"`
	Aud   string  `json:"aud"`
	Sub   string  `json:"sub"`
	Txn   string  `json:"txn"`
	Iat   int64   `json:"iat"`
	Exp   int64   `json:"exp"`
	Scope string  `json:"scope"`
	ReqWl string  `json:"req_wl"`
	Tctx  Context `json:"tctx"`
	Act   *act    `json:"act,omitempty"`
}

// act is RFC 8693's actor claim: the actor, and before it the one it acted for.
type act struct {
	Sub string `json:"sub"`
	Act *act   `json:"act,omitempty"`
}

// Sign mints the Txn-Token of c, good for Lifetime from now: a compact JWS (RFC 7515) whose
// header, the same for every token of the key, is encoded once.
func (s *Signer) Sign(c Call, now time.Time) (string, error) {
	body := claims{Iss: s.issuer, Aud: c.Audience, Sub: c.Subject, Txn: c.AuditID, Iat: now.Unix(),
		Exp: now.Add(Lifetime).Unix(), Scope: c.Ref, ReqWl: s.issuer, Tctx: c.Context}
	for i := len(c.Actors) - 1; i >= 0; i-- {
		body.Act = &act{Sub: c.Actors[i], Act: body.Act}
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return "", fmt.Errorf("txn-token: encode: %w", err)
	}
	enc := base64.RawURLEncoding
	buf := make([]byte, 0, len(s.header)+1+enc.EncodedLen(len(payload))+1+enc.EncodedLen(ed25519.SignatureSize))
	buf = append(buf, s.header...)
	buf = append(buf, '.')
	buf = enc.AppendEncode(buf, payload)
	sig := ed25519.Sign(s.key, buf)
	buf = append(buf, '.')
	return string(enc.AppendEncode(buf, sig)), nil
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
