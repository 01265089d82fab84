package txntoken

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func seed(b byte) []byte { return bytes.Repeat([]byte{b}, ed25519.SeedSize) }

// TestSignVerifies: a token verifies with the published key, carries its type and claims,
// and the JWKS publishes the retired key beside the current one (public halves only).
func TestSignVerifies(t *testing.T) {
	s, err := New("https://gw.example", [][]byte{seed(1), seed(2)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := s.Sign(Call{AuditID: "inv_1", Subject: "user:ann", Audience: "xema-provider:https://p", Ref: "pay:send@1",
		Context: Context{Org: "acme", Environment: "prod", InputHash: InputHash([]byte(`{}`)), RiskTier: "high"},
		Actors:  []string{"agent:bot", "workflow:w"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	var set struct {
		Keys []struct{ Kid, X, D string } `json:"keys"`
	}
	if err := json.Unmarshal(s.JWKS(), &set); err != nil || len(set.Keys) != 2 || set.Keys[0].D != "" {
		t.Fatalf("JWKS %s: want two public keys", s.JWKS())
	}
	claims := jwt.MapClaims{}
	parsed, err := jwt.ParseWithClaims(tok, claims, func(tk *jwt.Token) (any, error) {
		x, _ := base64.RawURLEncoding.DecodeString(set.Keys[0].X)
		if tk.Header["kid"] != set.Keys[0].Kid {
			t.Errorf("kid %v, want the current key's %s", tk.Header["kid"], set.Keys[0].Kid)
		}
		return ed25519.PublicKey(x), nil
	}, jwt.WithValidMethods([]string{"EdDSA"}), jwt.WithAudience("xema-provider:https://p"))
	if err != nil {
		t.Fatal(err)
	}
	act, _ := claims["act"].(map[string]any)
	inner, _ := act["act"].(map[string]any)
	exp, _ := claims.GetExpirationTime()
	if parsed.Header["typ"] != Type || claims["txn"] != "inv_1" || claims["sub"] != "user:ann" || act["sub"] != "agent:bot" ||
		inner["sub"] != "workflow:w" || claims["req_wl"] != "https://gw.example" || exp.Sub(now) > Lifetime {
		t.Fatalf("claims %v header %v", claims, parsed.Header)
	}
	if !strings.HasPrefix(InputHash([]byte("x")), "sha256:2d711642") {
		t.Fatal("InputHash is not the hex SHA-256")
	}
	if _, err := New("x", [][]byte{[]byte("short")}); err == nil {
		t.Fatal("a seed of the wrong size was taken")
	}
}

// BenchmarkSign is what a Txn-Token adds to a call: one Ed25519 signature and its JSON.
func BenchmarkSign(b *testing.B) {
	s, err := New("https://gw.example", [][]byte{seed(1)})
	if err != nil {
		b.Fatal(err)
	}
	c := Call{AuditID: "inv_06h4f1qdl4jmo93ptqn5p73ep0", Subject: "user:ann", Audience: "xema-provider:https://p", Ref: "pay:send@1",
		Context: Context{Org: "acme", Environment: "prod", InputHash: InputHash([]byte(`{"amount":10}`)), RiskTier: "high"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Sign(c, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}
