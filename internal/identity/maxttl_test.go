package identity_test

import (
	"crypto/rsa"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/xemahq/xema/internal/identity"
)

func TestMaxTokenTTL(t *testing.T) {
	k1 := rsaKey(t, 0)
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"k1": k1})
	def := newVerifier(t, ks.URL)
	oneHour := newVerifier(t, ks.URL, func(c *identity.Config) { c.MaxTokenTTL = time.Hour })
	now := time.Now()
	for _, tc := range []struct {
		name   string
		v      *identity.Verifier
		claims jwt.MapClaims
		reason string // "" accepted
	}{
		{"5 minutes under the 24h default", def, baseClaims(), ""},
		{"exactly 24h", def, with(baseClaims(), "exp", now.Add(24*time.Hour).Unix()), ""},
		{"ten years", def, with(baseClaims(), "exp", now.Add(10*365*24*time.Hour).Unix()), identity.ReasonTTLTooLong},
		{"25h without iat: exp-now", def, with(baseClaims(), "iat", nil, "exp", now.Add(25*time.Hour).Unix()), identity.ReasonTTLTooLong},
		{"2h without iat under 24h", def, with(baseClaims(), "iat", nil, "exp", now.Add(2*time.Hour).Unix()), ""},
		{"old iat, long exp: exp-iat counts", oneHour, with(baseClaims(), "iat", now.Add(-50*time.Minute).Unix(), "exp", now.Add(20*time.Minute).Unix()), identity.ReasonTTLTooLong},
		{"2h over a 1h maximum", oneHour, with(baseClaims(), "exp", now.Add(2*time.Hour).Unix()), identity.ReasonTTLTooLong},
		{"30m under a 1h maximum", oneHour, with(baseClaims(), "exp", now.Add(30*time.Minute).Unix()), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := sign(t, jwt.SigningMethodRS256, k1, "k1", tc.claims)
			_, err := tc.v.Verify(t.Context(), tok)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			assertRejected(t, err, tc.reason, tok)
		})
	}
	if _, err := identity.NewVerifier(t.Context(), identity.Config{Issuer: testIssuer, Audience: testAudience,
		JWKSURL: ks.URL, Algorithms: []string{"RS256"}, MaxTokenTTL: -time.Second}); err == nil {
		t.Fatal("a negative MaxTokenTTL was accepted")
	}
}
