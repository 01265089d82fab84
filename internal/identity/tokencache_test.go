package identity_test

import (
	"context"
	"crypto/rsa"
	"fmt"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/xemahq/xema/internal/identity"
)

// TestTokenCacheKeepsEveryRefusal: with the cache on, each attack token is refused with
// the same reason twice in a row (the second answer may come from the cache).
func TestTokenCacheKeepsEveryRefusal(t *testing.T) {
	k1 := rsaKey(t, 0)
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"k1": k1})
	v := newVerifier(t, ks.URL)
	for name, tc := range map[string]struct {
		token, reason string
	}{
		"expired":       {sign(t, jwt.SigningMethodRS256, k1, "k1", with(baseClaims(), "exp", time.Now().Add(-5*time.Minute).Unix())), identity.ReasonExpired},
		"wrong issuer":  {sign(t, jwt.SigningMethodRS256, k1, "k1", with(baseClaims(), "iss", "https://evil.test/")), identity.ReasonWrongIssuer},
		"not yet valid": {sign(t, jwt.SigningMethodRS256, k1, "k1", with(baseClaims(), "nbf", time.Now().Add(5*time.Minute).Unix())), identity.ReasonNotYetValid},
		"bad claims":    {sign(t, jwt.SigningMethodRS256, k1, "k1", with(baseClaims(), "sub", "robot:x")), identity.ReasonBadClaims},
	} {
		for i := range 2 {
			_, err := v.Verify(t.Context(), tc.token)
			if identity.Reason(err) != tc.reason {
				t.Fatalf("%s, call %d: %v, want %s", name, i, err, tc.reason)
			}
		}
	}
}

// TestTokenCacheCopiesContexts: a caller changing its ExecContext never changes the next one.
func TestTokenCacheCopiesContexts(t *testing.T) {
	k := rsaKey(t, 0)
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"k1": k})
	v := newVerifier(t, ks.URL)
	tok := sign(t, jwt.SigningMethodRS256, k, "k1", with(baseClaims(), "groups", []string{"support"}))
	ec1, err := v.Verify(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	ec1.Groups[0] = "admins"
	ec2, err := v.Verify(t.Context(), tok)
	if err != nil || ec2.Groups[0] != "support" {
		t.Fatalf("second verification %+v, %v", ec2, err)
	}
}

// TestTokenCacheEndsAtExpiry: a cached token stops being accepted when verification would
// refuse it (exp plus the leeway), not later.
func TestTokenCacheEndsAtExpiry(t *testing.T) {
	k := rsaKey(t, 0)
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"k1": k})
	v := newVerifier(t, ks.URL, func(c *identity.Config) { c.Leeway = time.Second })
	now := time.Now()
	// jwt NumericDate has whole seconds: exp 2 s ahead, plus 1 s of leeway.
	tok := sign(t, jwt.SigningMethodRS256, k, "k1", with(baseClaims(), "iat", now.Unix(), "nbf", now.Unix(), "exp", now.Add(2*time.Second).Unix()))
	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Fatal(err)
	}
	deadline := time.Unix(now.Add(2*time.Second).Unix(), 0).Add(time.Second)
	time.Sleep(time.Until(deadline) + 50*time.Millisecond)
	_, err := v.Verify(t.Context(), tok)
	if identity.Reason(err) != identity.ReasonExpired {
		t.Fatalf("after exp + leeway: %v, want expired", err)
	}
}

// TestTokenCacheBounded: many distinct tokens never grow the cache past its size, and
// every one still verifies.
func TestTokenCacheBounded(t *testing.T) {
	k := rsaKey(t, 0)
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"k1": k})
	v := newVerifier(t, ks.URL, func(c *identity.Config) { c.TokenCacheSize = 8 })
	for i := range 40 {
		tok := sign(t, jwt.SigningMethodRS256, k, "k1", with(baseClaims(), "jti", fmt.Sprint(i)))
		if _, err := v.Verify(t.Context(), tok); err != nil {
			t.Fatal(err)
		}
	}
	if n := identity.TokenCacheLen(v); n > 8 {
		t.Fatalf("%d cached tokens, bound 8", n)
	}
}

// BenchmarkVerifyCached: the same token verified again (served by the cache) against the
// cache turned off (an RSA verification per call).
func BenchmarkVerifyCached(b *testing.B) {
	k := rsaKey(b, 0)
	ks := newKeyServer(b, map[string]*rsa.PrivateKey{"k1": k})
	tok := sign(b, jwt.SigningMethodRS256, k, "k1", with(baseClaims(),
		"groups", []string{"support"}, "roles", []string{"reader"}, "xema_org", "acme", "xema_armed", []string{"kb:*"}))
	for _, size := range []int{0, -1} {
		name := map[int]string{0: "cache", -1: "no-cache"}[size]
		v := newVerifier(b, ks.URL, func(c *identity.Config) { c.TokenCacheSize = size })
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(ctx, tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
