package identity_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/xemahq/xema/internal/identity"
)

const (
	testIssuer   = "https://idp.test/"
	testAudience = "xema"
)

// keyServer publishes a JWKS of RSA keys that a test can rotate, and counts fetches. It
// serves keys only; every token is checked by the real Verifier.
type keyServer struct {
	*httptest.Server
	mu      sync.Mutex
	keys    map[string]*rsa.PrivateKey
	fetches atomic.Int64
	// latency is how long each answer takes, as a remote identity provider's would.
	latency time.Duration
}

func newKeyServer(t testing.TB, keys map[string]*rsa.PrivateKey) *keyServer {
	t.Helper()
	ks := &keyServer{keys: keys}
	ks.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ks.fetches.Add(1)
		ks.mu.Lock()
		defer ks.mu.Unlock()
		time.Sleep(ks.latency) // the provider's latency, not a synchronisation
		var set jwkset.JWKSMarshal
		for kid, k := range ks.keys {
			jwk, err := jwkset.NewJWKFromKey(&k.PublicKey, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: jwkset.AlgRS256, USE: jwkset.UseSig}})
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			set.Keys = append(set.Keys, jwk.Marshal())
		}
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(ks.Close)
	return ks
}

func (ks *keyServer) setKeys(keys map[string]*rsa.PrivateKey) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.keys = keys
}

func (ks *keyServer) setLatency(d time.Duration) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.latency = d
}

var (
	keyOnce sync.Once
	keyPool []*rsa.PrivateKey
)

// rsaKey returns one of a few 2048-bit keys generated once per test binary.
func rsaKey(t testing.TB, i int) *rsa.PrivateKey {
	t.Helper()
	keyOnce.Do(func() {
		for range 4 {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			keyPool = append(keyPool, k)
		}
	})
	return keyPool[i]
}

func baseClaims() jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{
		"iss": testIssuer, "aud": testAudience, "sub": "agent:support-bot",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
		"xema_env": "project",
	}
}

func sign(t testing.TB, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func with(c jwt.MapClaims, kv ...any) jwt.MapClaims {
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(c, kv[i].(string))
			continue
		}
		c[kv[i].(string)] = kv[i+1]
	}
	return c
}

func newVerifier(t testing.TB, jwksURL string, mutate ...func(*identity.Config)) *identity.Verifier {
	t.Helper()
	cfg := identity.Config{Issuer: testIssuer, Audience: testAudience, JWKSURL: jwksURL, Algorithms: []string{"RS256"}}
	for _, m := range mutate {
		m(&cfg)
	}
	v, err := identity.NewVerifier(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// assertRejected checks the reason and that the error text holds no part of the token.
func assertRejected(t *testing.T, err error, reason, token string) {
	t.Helper()
	if !errors.Is(err, identity.ErrTokenInvalid) {
		t.Fatalf("want ErrTokenInvalid, got %v", err)
	}
	if got := identity.Reason(err); got != reason {
		t.Fatalf("reason %q, want %q (%v)", got, reason, err)
	}
	for _, part := range strings.Split(token, ".") {
		if len(part) >= 8 && strings.Contains(err.Error(), part) {
			t.Fatalf("error text contains part of the token: %v", err)
		}
	}
}

func publicPEM(t testing.TB, k *rsa.PrivateKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func TestAttacks(t *testing.T) {
	k1, k2, stranger := rsaKey(t, 0), rsaKey(t, 1), rsaKey(t, 2)
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"k1": k1, "shared-other-issuer": k2})
	v := newVerifier(t, ks.URL)
	now := time.Now()

	valid := sign(t, jwt.SigningMethodRS256, k1, "k1", baseClaims())
	if ec, err := v.Verify(t.Context(), valid); err != nil || ec.Subject.Ref != "agent:support-bot" || ec.Environment != "project" {
		t.Fatalf("valid token: %+v %v", ec, err)
	}
	// Within the 30s default leeway: accepted, showing the leeway is there and bounded below.
	if _, err := v.Verify(t.Context(), sign(t, jwt.SigningMethodRS256, k1, "k1", with(baseClaims(), "exp", now.Add(-10*time.Second).Unix()))); err != nil {
		t.Fatalf("exp 10s ago must be inside the leeway: %v", err)
	}

	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, baseClaims()).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	noneWithKid := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodNone, baseClaims())
		tok.Header["kid"] = "k1"
		s, _ := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
		return s
	}()
	tamper := func(tok string) string {
		parts := strings.Split(tok, ".")
		payload, _ := json.Marshal(with(baseClaims(), "xema_env", "prod", "sub", "user:root"))
		parts[1] = base64.RawURLEncoding.EncodeToString(payload)
		return strings.Join(parts, ".")
	}

	for _, tc := range []struct {
		name, token, reason string
	}{
		{"alg none", none, identity.ReasonAlgNotAllowed},
		{"alg none with kid", noneWithKid, identity.ReasonAlgNotAllowed},
		{"HS256 signed with the RSA public key", sign(t, jwt.SigningMethodHS256, publicPEM(t, k1), "k1", baseClaims()), identity.ReasonAlgNotAllowed},
		{"RS512 outside the allow-list", sign(t, jwt.SigningMethodRS512, k1, "k1", baseClaims()), identity.ReasonAlgNotAllowed},
		{"unknown kid", sign(t, jwt.SigningMethodRS256, stranger, "nope", baseClaims()), identity.ReasonUnknownKID},
		{"no kid", sign(t, jwt.SigningMethodRS256, k1, "", baseClaims()), identity.ReasonMissingKID},
		{"expired", sign(t, jwt.SigningMethodRS256, k1, "k1", with(baseClaims(), "exp", now.Add(-5*time.Minute).Unix())), identity.ReasonExpired},
		{"not yet valid", sign(t, jwt.SigningMethodRS256, k1, "k1", with(baseClaims(), "nbf", now.Add(5*time.Minute).Unix())), identity.ReasonNotYetValid},
		{"issued in the future", sign(t, jwt.SigningMethodRS256, k1, "k1", with(baseClaims(), "iat", now.Add(5*time.Minute).Unix())), identity.ReasonNotYetValid},
		{"no exp", sign(t, jwt.SigningMethodRS256, k1, "k1", with(baseClaims(), "exp", nil)), identity.ReasonMissingExp},
		{"wrong issuer", sign(t, jwt.SigningMethodRS256, k1, "k1", with(baseClaims(), "iss", "https://evil.test/")), identity.ReasonWrongIssuer},
		{"wrong audience", sign(t, jwt.SigningMethodRS256, k1, "k1", with(baseClaims(), "aud", "someone-else")), identity.ReasonWrongAudience},
		{"no audience", sign(t, jwt.SigningMethodRS256, k1, "k1", with(baseClaims(), "aud", nil)), identity.ReasonWrongAudience},
		{"tampered payload", tamper(valid), identity.ReasonBadSignature},
		{"wrong key under a known kid", sign(t, jwt.SigningMethodRS256, stranger, "k1", baseClaims()), identity.ReasonBadSignature},
		{"validly signed by a second, unconfigured issuer", sign(t, jwt.SigningMethodRS256, stranger, "other-issuer-key", with(baseClaims(), "iss", "https://other.test/")), identity.ReasonUnknownKID},
		{"second issuer whose key shares the JWKS", sign(t, jwt.SigningMethodRS256, k2, "shared-other-issuer", with(baseClaims(), "iss", "https://other.test/")), identity.ReasonWrongIssuer},
		{"not a JWT", "not-a-token", identity.ReasonMalformed},
		{"garbage segments", "aaaa.bbbb.cccc", identity.ReasonMalformed},
		{"bad subject kind", sign(t, jwt.SigningMethodRS256, k1, "k1", with(baseClaims(), "sub", "robot:x")), identity.ReasonBadClaims},
		{"no environment", sign(t, jwt.SigningMethodRS256, k1, "k1", with(baseClaims(), "xema_env", nil)), identity.ReasonBadClaims},
		{"bad armed pattern", sign(t, jwt.SigningMethodRS256, k1, "k1", with(baseClaims(), "xema_armed", []string{"rm -rf"})), identity.ReasonBadClaims},
		{"bad org role", sign(t, jwt.SigningMethodRS256, k1, "k1", with(baseClaims(), "xema_org_role", "god")), identity.ReasonBadClaims},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ec, err := v.Verify(t.Context(), tc.token)
			if err == nil {
				t.Fatalf("accepted: %+v", ec)
			}
			assertRejected(t, err, tc.reason, tc.token)
		})
	}
}

func TestKeyRemovedAfterRotation(t *testing.T) {
	oldKey, newKey := rsaKey(t, 0), rsaKey(t, 1)
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"old": oldKey})
	v := newVerifier(t, ks.URL)
	oldTok := sign(t, jwt.SigningMethodRS256, oldKey, "old", baseClaims())
	if _, err := v.Verify(t.Context(), oldTok); err != nil {
		t.Fatalf("before rotation: %v", err)
	}
	ks.setKeys(map[string]*rsa.PrivateKey{"new": newKey})
	// A provider across a network answers in milliseconds: the refresh must not be bound by
	// the rate limiter's wait (jwkset gave it the same 1 ms context: every refresh failed).
	ks.setLatency(20 * time.Millisecond)
	// The first token under the new kid makes the verifier refetch the JWKS ...
	if _, err := v.Verify(t.Context(), sign(t, jwt.SigningMethodRS256, newKey, "new", baseClaims())); err != nil {
		t.Fatalf("token under the rotated-in key: %v", err)
	}
	// ... after which the removed key no longer verifies anything.
	_, err := v.Verify(t.Context(), oldTok)
	assertRejected(t, err, identity.ReasonUnknownKID, oldTok)
	if n := ks.fetches.Load(); n != 2 {
		t.Fatalf("JWKS fetched %d times, want 2 (start + one refresh on the unknown kid)", n)
	}
}

func TestJWKSFetchedOnceUnderLoad(t *testing.T) {
	k := rsaKey(t, 0)
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"k1": k})
	v := newVerifier(t, ks.URL)
	tok := sign(t, jwt.SigningMethodRS256, k, "k1", baseClaims())
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 125 {
				if _, err := v.Verify(context.Background(), tok); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of 1000 verifications failed", failed.Load())
	}
	if n := ks.fetches.Load(); n != 1 {
		t.Fatalf("JWKS fetched %d times for 1000 verifications, want 1", n)
	}
	// 1000 tokens with unknown kids trigger at most one rate-limited refresh, and none waits.
	bad := sign(t, jwt.SigningMethodRS256, rsaKey(t, 2), "unknown", baseClaims())
	for range 1000 {
		if _, err := v.Verify(context.Background(), bad); identity.Reason(err) != identity.ReasonUnknownKID {
			t.Fatalf("unknown kid: %v", err)
		}
	}
	if n := ks.fetches.Load(); n != 2 {
		t.Fatalf("JWKS fetched %d times after 1000 unknown kids, want 2", n)
	}
}

func TestNewVerifierFailsClosed(t *testing.T) {
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	empty := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"keys":[]}`))
	}))
	defer empty.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"k1": rsaKey(t, 0)})
	base := identity.Config{Issuer: testIssuer, Audience: testAudience, JWKSURL: ks.URL, Algorithms: []string{"RS256"}}
	for name, mutate := range map[string]func(*identity.Config){
		"JWKS answers 503":    func(c *identity.Config) { c.JWKSURL = down.URL },
		"JWKS unreachable":    func(c *identity.Config) { c.JWKSURL = closedURL },
		"JWKS has no keys":    func(c *identity.Config) { c.JWKSURL = empty.URL },
		"no JWKS":             func(c *identity.Config) { c.JWKSURL = "" },
		"both JWKS sources":   func(c *identity.Config) { c.LocalJWKS = json.RawMessage(`{"keys":[]}`) },
		"no issuer":           func(c *identity.Config) { c.Issuer = "" },
		"no audience":         func(c *identity.Config) { c.Audience = "" },
		"no algorithms":       func(c *identity.Config) { c.Algorithms = nil },
		"HS256 allowed":       func(c *identity.Config) { c.Algorithms = []string{"RS256", "HS256"} },
		"none allowed":        func(c *identity.Config) { c.Algorithms = []string{"none"} },
		"leeway over 2m":      func(c *identity.Config) { c.Leeway = 3 * time.Minute },
		"negative leeway":     func(c *identity.Config) { c.Leeway = -time.Second },
		"mapping without env": func(c *identity.Config) { m := identity.DevMapping(); m.Environment = identity.Field{}; c.Mapping = &m },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := base
			mutate(&cfg)
			if v, err := identity.NewVerifier(t.Context(), cfg); err == nil || v != nil {
				t.Fatal("NewVerifier accepted a configuration it cannot verify with")
			}
		})
	}
}

func TestAuthenticate(t *testing.T) {
	k := rsaKey(t, 0)
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"k1": k})
	v := newVerifier(t, ks.URL)
	tok := sign(t, jwt.SigningMethodRS256, k, "k1", baseClaims())
	for _, tc := range []struct{ header, reason string }{
		{"", identity.ReasonMissingToken},
		{"Basic dXNlcjpwYXNz", identity.ReasonMissingToken},
		{"Bearer ", identity.ReasonMissingToken},
		{"Bearer " + tok, ""},
		{"bearer " + tok, ""},
		{"Bearer " + tok + "x", identity.ReasonBadSignature},
	} {
		r := httptest.NewRequest(http.MethodGet, "/v1/x", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		ec, err := v.Authenticate(r)
		if got := identity.Reason(err); got != tc.reason {
			t.Errorf("header %.20q: reason %q, want %q (%v)", tc.header, got, tc.reason, err)
		}
		if tc.reason == "" && ec.Subject.Ref != "agent:support-bot" {
			t.Errorf("authenticated context %+v", ec)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	k := rsaKey(b, 0)
	ks := newKeyServer(b, map[string]*rsa.PrivateKey{"k1": k})
	v := newVerifier(b, ks.URL)
	tok := sign(b, jwt.SigningMethodRS256, k, "k1", with(baseClaims(),
		"groups", []string{"support"}, "roles", []string{"reader"}, "xema_org", "acme", "xema_armed", []string{"kb:*"}))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(ctx, tok); err != nil {
			b.Fatal(err)
		}
	}
}

// TestOutboundTokensRefused: a token marked outbound, or one of the gateway's own OAuth
// client, is refused even when it is signed by the issuer for the gateway's audience.
func TestOutboundTokensRefused(t *testing.T) {
	k := rsaKey(t, 0)
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"k1": k})
	v := newVerifier(t, ks.URL, func(c *identity.Config) { c.RefusedClients = []string{"xema-gateway-client"} })
	for name, claims := range map[string]jwt.MapClaims{
		"outbound claim": with(baseClaims(), identity.ClaimUse, "outbound"),
		"azp":            with(baseClaims(), "azp", "xema-gateway-client"),
		"client_id":      with(baseClaims(), "client_id", "xema-gateway-client"),
	} {
		t.Run(name, func(t *testing.T) {
			tok := sign(t, jwt.SigningMethodRS256, k, "k1", claims)
			_, err := v.Verify(t.Context(), tok)
			assertRejected(t, err, identity.ReasonOutboundToken, tok)
		})
	}
	if _, err := v.Verify(t.Context(), sign(t, jwt.SigningMethodRS256, k, "k1", with(baseClaims(), "azp", "someone-else"))); err != nil {
		t.Fatalf("another client's token: %v", err)
	}
}

// TestCritRefused: RFC 7515 §4.1.11: a token whose crit header names extensions the gateway
// does not understand (it understands none) is refused, however well it is signed.
func TestCritRefused(t *testing.T) {
	k := rsaKey(t, 0)
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"k1": k})
	v := newVerifier(t, ks.URL)
	for name, crit := range map[string]any{"unknown": []string{"http://example.com/ext"}, "empty": []string{}, "not a list": "b64"} {
		t.Run(name, func(t *testing.T) {
			tok := jwt.NewWithClaims(jwt.SigningMethodRS256, baseClaims())
			tok.Header["kid"], tok.Header["crit"] = "k1", crit
			if name == "unknown" {
				tok.Header["http://example.com/ext"] = true
			}
			raw, err := tok.SignedString(k)
			if err != nil {
				t.Fatal(err)
			}
			_, err = v.Verify(t.Context(), raw)
			assertRejected(t, err, identity.ReasonMalformed, raw)
		})
	}
	if _, err := v.Verify(t.Context(), sign(t, jwt.SigningMethodRS256, k, "k1", baseClaims())); err != nil {
		t.Fatalf("the same token without crit: %v", err)
	}
}

// TestControlCharactersRefused: identity strings end up in audit records and an admin's
// terminal; a control character anywhere in them refuses the token.
func TestControlCharactersRefused(t *testing.T) {
	k := rsaKey(t, 0)
	ks := newKeyServer(t, map[string]*rsa.PrivateKey{"k1": k})
	v := newVerifier(t, ks.URL)
	for name, kv := range map[string][]any{
		"subject":     {"sub", "agent:x\x1b]0;PWNED\x07\x1b[2J"},
		"subject c1":  {"sub", "agent:x\u009b2J"},
		"org":         {"xema_org", "acme\x1b[31m"},
		"environment": {"xema_env", "project\r"},
		"project":     {"xema_project", "p\x00"},
		"session":     {"xema_session", "s\x7f"},
		"groups":      {"groups", []any{"ok", "bad\x1b"}},
		"roles":       {"roles", []any{"reader\a"}},
		"armed":       {"xema_armed", []any{"kb:*\x1b"}},
	} {
		t.Run(name, func(t *testing.T) {
			tok := sign(t, jwt.SigningMethodRS256, k, "k1", with(baseClaims(), kv...))
			_, err := v.Verify(t.Context(), tok)
			assertRejected(t, err, identity.ReasonBadClaims, tok)
		})
	}
}
