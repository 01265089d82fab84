package identity_test

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/identity/hydratest"
	"github.com/xemahq/xema/internal/oauth"
)

// hydraMapping reads hydra's client_credentials JWTs: sub is the client id, and hydra puts no
// custom claims there, so kind and environment come from configuration.
func hydraMapping() *identity.ClaimMapping {
	return &identity.ClaimMapping{
		SubjectName: identity.Field{Claim: "client_id"},
		SubjectKind: identity.Field{Default: "service"},
		Roles:       "scp",
		Environment: identity.Field{Claim: "xema_env", Default: "service"},
		// hydra's client-credentials tokens name no org: as --default-org default.
		Org: identity.Field{Default: identity.DefaultOrg},
	}
}

func hydraToken(t *testing.T, h *hydratest.Server, audience string) string {
	t.Helper()
	c := h.CreateClient(t, audience)
	ts, err := oauth.NewTokenSource(oauth.Config{TokenURL: h.TokenURL(), ClientID: c.ID, ClientSecret: c.Secret, Audience: audience})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ts.Token(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestVerifierAgainstHydra(t *testing.T) {
	h := hydratest.Start(t)
	v, err := identity.NewVerifier(t.Context(), identity.Config{
		Issuer: h.Issuer, Audience: "xema", JWKSURL: h.JWKSURL(), Algorithms: []string{"RS256"}, Mapping: hydraMapping(),
	})
	if err != nil {
		t.Fatal(err)
	}
	c := h.CreateClient(t, "xema")
	ts, err := oauth.NewTokenSource(oauth.Config{TokenURL: h.TokenURL(), ClientID: c.ID, ClientSecret: c.Secret, Audience: "xema"})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ts.Token(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ec, err := v.Verify(t.Context(), tok)
	if err != nil {
		t.Fatalf("hydra's token rejected: %v", err)
	}
	if ec.Subject.Ref != "service:"+c.ID || ec.Environment != "service" || ec.Armed[0] != "*" {
		t.Fatalf("hydra token mapped to %+v", ec)
	}

	// A token hydra issued for another audience.
	other := hydraToken(t, h, "billing")
	_, err = v.Verify(t.Context(), other)
	assertRejected(t, err, identity.ReasonWrongAudience, other)

	// HS256 signed with hydra's own published RSA public key, under hydra's kid.
	parsed, _, err := jwt.NewParser().ParseUnverified(tok, jwt.MapClaims{})
	if err != nil {
		t.Fatal(err)
	}
	kid := parsed.Header["kid"].(string)
	forged := sign(t, jwt.SigningMethodHS256, hydraPublicPEM(t, h, kid), kid, parsed.Claims.(jwt.MapClaims))
	_, err = v.Verify(t.Context(), forged)
	assertRejected(t, err, identity.ReasonAlgNotAllowed, forged)

	// A verifier that expects another issuer refuses hydra's valid token.
	v2, err := identity.NewVerifier(t.Context(), identity.Config{
		Issuer: "https://kc.example.com/realms/xema", Audience: "xema", JWKSURL: h.JWKSURL(), Algorithms: []string{"RS256"}, Mapping: hydraMapping(),
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = v2.Verify(t.Context(), tok)
	assertRejected(t, err, identity.ReasonWrongIssuer, tok)

	// A key hydra did not publish.
	stranger := sign(t, jwt.SigningMethodRS256, rsaKey(t, 2), kid, with(parsed.Claims.(jwt.MapClaims), "exp", time.Now().Add(time.Hour).Unix()))
	_, err = v.Verify(t.Context(), stranger)
	assertRejected(t, err, identity.ReasonBadSignature, stranger)
}

func hydraPublicPEM(t *testing.T, h *hydratest.Server, kid string) []byte {
	t.Helper()
	resp, err := http.Get(h.JWKSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var set jwkset.JWKSMarshal
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
		t.Fatal(err)
	}
	for _, m := range set.Keys {
		if m.KID != kid {
			continue
		}
		jwk, err := jwkset.NewJWKFromMarshal(m, jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pub, ok := jwk.Key().(*rsa.PublicKey)
		if !ok {
			t.Fatalf("hydra key %s is %T", kid, jwk.Key())
		}
		der, _ := x509.MarshalPKIXPublicKey(pub)
		return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	}
	t.Fatalf("kid %s not in hydra's JWKS", kid)
	return nil
}

// TestAuthorizationCodeAgainstHydra: a person signed in through hydra's authorization code
// flow with PKCE (a public client, the login and consent app accepting alice) gets a JWT access
// token whose session claims hydra puts under "ext"; a mapping reading ext.* gives the
// Execution Context the console's sign-in relies on.
func TestAuthorizationCodeAgainstHydra(t *testing.T) {
	h := hydratest.StartWithLogin(t, map[string]hydratest.Person{
		"": {Subject: "user:alice", AccessToken: map[string]any{"xema_org_role": "org_admin", "xema_env": "org", "xema_org": "acme"}},
	})
	redirect := "http://127.0.0.1:1/console/callback" // never fetched: the flow stops at it
	c := h.CreatePublicClient(t, redirect, "xema")
	tok := h.AuthorizationCodeToken(t, c, redirect, "xema", "")
	m := &identity.ClaimMapping{SubjectRef: "sub", OrgRole: identity.Field{Claim: "ext.xema_org_role"},
		Org: identity.Field{Claim: "ext.xema_org"}, Environment: identity.Field{Claim: "ext.xema_env"}}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	v, err := identity.NewVerifier(t.Context(), identity.Config{
		Issuer: h.Issuer, Audience: "xema", JWKSURL: h.JWKSURL(), Algorithms: []string{"RS256"}, Mapping: m,
	})
	if err != nil {
		t.Fatal(err)
	}
	ec, err := v.Verify(t.Context(), tok)
	if err != nil {
		t.Fatalf("hydra's authorization-code token rejected: %v", err)
	}
	if ec.Subject.Ref != "user:alice" || ec.OrgRole != "org_admin" || ec.Org != "acme" || ec.Environment != "org" {
		t.Fatalf("hydra's authorization-code token mapped to %+v", ec)
	}
}
