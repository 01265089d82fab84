package identity_test

import (
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/oauth"
)

func TestServerIdentityDev(t *testing.T) {
	dir := t.TempDir()
	si, err := identity.NewServerIdentity(t.Context(), identity.ServerConfig{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer si.Close()
	if si.Mounts()[identity.JWKSPath] == nil {
		t.Fatal("dev mode must mount the JWKS")
	}
	iss, err := identity.OpenIssuer(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := iss.Mint(identity.DevClaims{Subject: "user:ada", Environment: "project", TTL: time.Minute})
	r := httptest.NewRequest(http.MethodPost, "/v1/capabilities/invoke", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	if ec, err := si.Authenticate(r); err != nil || ec.Subject.Ref != "user:ada" {
		t.Fatalf("%+v %v", ec, err)
	}
	// The gateway's own outbound token in development is a dev token for service:xema-gateway
	// with the provider's audience, cached per audience, and never accepted inbound.
	own, err := si.ServiceTokens().Token(t.Context(), "xema-provider:http://127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := si.ServiceTokens().Token(t.Context(), "xema-provider:http://127.0.0.1:9"); again != own {
		t.Fatal("a second call for the same audience minted a new token")
	}
	if other, _ := si.ServiceTokens().Token(t.Context(), "xema-provider:http://127.0.0.1:10"); other == own {
		t.Fatal("two audiences share one token")
	}
	var te *identity.TokenError
	if _, err := si.Verify(t.Context(), own); !errors.As(err, &te) || te.Reason != identity.ReasonWrongAudience {
		t.Fatalf("outbound token accepted inbound or refused for another reason: %v", err)
	}
	if _, err := iss.Mint(identity.DevClaims{Subject: "service:xema-gateway", Environment: "service", TTL: time.Minute,
		Outbound: true}); err == nil {
		t.Fatal("an outbound token for the gateway's own audience was minted")
	}
}

func TestServerIdentityExternalDiscovery(t *testing.T) {
	k := rsaKey(t, 0)
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"k1": k})
	var issuer string
	disco := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/.well-known/openid-configuration") {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": issuer, "jwks_uri": ks.URL})
	}))
	defer disco.Close()
	issuer = disco.URL
	si, err := identity.NewServerIdentity(t.Context(), identity.ServerConfig{DataDir: t.TempDir(), Issuer: issuer, Audience: testAudience, ClaimMapping: "default", DefaultOrg: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	defer si.Close()
	if len(si.Mounts()) != 0 {
		t.Fatal("an external issuer mounts nothing")
	}
	tok := sign(t, jwt.SigningMethodRS256, k, "k1", with(baseClaims(), "iss", issuer))
	if _, err := si.Verify(t.Context(), tok); err != nil {
		t.Fatal(err)
	}
	if _, err := si.ServiceTokens().Token(t.Context(), "xema-provider:x"); !errors.Is(err, oauth.ErrNoToken) {
		t.Fatalf("no outbound identity configured must be ErrNoToken, got %v", err)
	}

	// A discovery document naming another issuer is refused at start.
	if _, err := identity.NewServerIdentity(t.Context(), identity.ServerConfig{DataDir: t.TempDir(), Issuer: issuer + "/x", Audience: testAudience}); err == nil || !strings.Contains(err.Error(), "names issuer") {
		t.Fatal("accepted a discovery document for another issuer")
	}
	if _, err := identity.NewServerIdentity(t.Context(), identity.ServerConfig{DataDir: t.TempDir(), Issuer: issuer, Audience: testAudience, ClaimMapping: "nope.json"}); err == nil {
		t.Fatal("accepted a missing claim mapping file")
	}
}

func TestServerIdentityLeeway(t *testing.T) {
	k := rsaKey(t, 0)
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"k1": k})
	now := time.Now()
	expired5s := sign(t, jwt.SigningMethodRS256, k, "k1",
		with(baseClaims(), "iat", now.Add(-time.Minute).Unix(), "nbf", now.Add(-time.Minute).Unix(), "exp", now.Add(-5*time.Second).Unix()))
	for _, tc := range []struct {
		name   string
		leeway time.Duration
		accept bool
	}{
		{"default leeway accepts", 0, true},
		{"explicit default accepts", identity.DefaultLeeway, true},
		{"1s leeway refuses", time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			si, err := identity.NewServerIdentity(t.Context(), identity.ServerConfig{DataDir: t.TempDir(),
				Issuer: testIssuer, Audience: testAudience, JWKSURL: ks.URL, ClaimMapping: "default", Leeway: tc.leeway, DefaultOrg: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			defer si.Close()
			_, err = si.Verify(t.Context(), expired5s)
			if tc.accept {
				if err != nil {
					t.Fatalf("token expired 5s ago refused: %v", err)
				}
				return
			}
			assertRejected(t, err, identity.ReasonExpired, expired5s)
		})
	}
	for _, bad := range []time.Duration{-time.Second, identity.MaxLeeway + time.Second} {
		_, err := identity.NewServerIdentity(t.Context(), identity.ServerConfig{DataDir: t.TempDir(),
			Issuer: testIssuer, Audience: testAudience, JWKSURL: ks.URL, ClaimMapping: "default", Leeway: bad})
		if err == nil || !strings.Contains(err.Error(), "leeway") {
			t.Fatalf("leeway %v: err = %v, want an out-of-range leeway error", bad, err)
		}
	}
}

// TestExternalIssuerOrg: an external issuer's token that names no org (absent, null or "")
// is refused unless the operator names a default org; a token naming one keeps it.
func TestExternalIssuerOrg(t *testing.T) {
	k := rsaKey(t, 0)
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"k1": k})
	open := func(defaultOrg string) *identity.ServerIdentity {
		si, err := identity.NewServerIdentity(t.Context(), identity.ServerConfig{DataDir: t.TempDir(),
			Issuer: testIssuer, Audience: testAudience, JWKSURL: ks.URL, ClaimMapping: "default", DefaultOrg: defaultOrg})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(si.Close)
		return si
	}
	strict, defaulted := open(""), open("tenant-x")
	for name, org := range map[string]any{"absent": nil, "null": "<null>", "empty": ""} {
		claims := baseClaims()
		switch org {
		case nil:
		case "<null>":
			claims["xema_org"] = nil
		default:
			claims["xema_org"] = org
		}
		tok := sign(t, jwt.SigningMethodRS256, k, "k1", claims)
		t.Run(name, func(t *testing.T) {
			_, err := strict.Verify(t.Context(), tok)
			assertRejected(t, err, identity.ReasonBadClaims, tok)
			if !strings.Contains(err.Error(), `no org (claim "xema_org")`) || !strings.Contains(err.Error(), "xema serve --default-org ORG") {
				t.Fatalf("the refusal does not name the claim and --default-org: %v", err)
			}
			ec, err := defaulted.Verify(t.Context(), tok)
			if err != nil || ec.Org != "tenant-x" {
				t.Fatalf("with --default-org: %+v %v", ec, err)
			}
		})
	}
	tok := sign(t, jwt.SigningMethodRS256, k, "k1", with(baseClaims(), "xema_org", "acme"))
	for _, si := range []*identity.ServerIdentity{strict, defaulted} {
		if ec, err := si.Verify(t.Context(), tok); err != nil || ec.Org != "acme" {
			t.Fatalf("a token naming its org: %+v %v", ec, err)
		}
	}
}
