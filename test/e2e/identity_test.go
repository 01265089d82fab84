package e2e

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestUnauthenticatedAttemptsAreAudited sends tokens the verifier must refuse to the HTTP API
// and to /mcp. Each refusal is a typed 401 with an audit id; an org admin finds the attempt in
// the audit log with the verifier's reason; the token is in neither the answer, the record nor
// the gateway's logs.
func TestUnauthenticatedAttemptsAreAudited(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		admin := g.adminToken()
		agent := g.token("--subject", "agent:support-bot", "--env", "project")
		out, err := g.run("dev", "token", "--data-dir", t.TempDir(), "--subject", "agent:support-bot", "--env", "project")
		if err != nil {
			t.Fatalf("dev token of a second issuer: %v\n%s", err, out)
		}
		otherIssuer := strings.TrimSpace(out)

		attempts := []struct {
			name, token, reason string
		}{
			{"forged signature", forgeSignature(t, agent), "bad_signature"},
			{"expired", expiredToken(t, g, agent), "expired"},
			{"second issuer", otherIssuer, "unknown_kid"},
			{"alg none", algNone(t, agent), "alg_not_allowed"},
			{"missing header", "", "missing_token"},
		}
		const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`
		surfaces := []struct{ route, body string }{
			{"/v1/capabilities/invoke", `{"ref":"kb:page.read@1","input":{"pageId":"welcome"}}`},
			{"/mcp", initialize},
		}
		var auditIDs []string
		for _, a := range attempts {
			for _, s := range surfaces {
				t.Run(a.name+" "+s.route, func(t *testing.T) {
					req, _ := http.NewRequest(http.MethodPost, g.URL+s.route, strings.NewReader(s.body))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Accept", "application/json, text/event-stream")
					if a.token != "" {
						req.Header.Set("Authorization", "Bearer "+a.token)
					}
					r := g.do(req)
					expect(t, r, http.StatusUnauthorized)
					if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
						t.Errorf("Content-Type %q", ct)
					}
					keys := make([]string, 0, len(r.Body))
					for k := range r.Body {
						keys = append(keys, k)
					}
					slices.Sort(keys)
					id := str(r.Body, "auditId")
					if !slices.Equal(keys, []string{"auditId", "code", "message"}) || str(r.Body, "code") != "UNAUTHENTICATED" ||
						str(r.Body, "message") == "" || !strings.HasPrefix(id, "unauth_") {
						t.Fatalf("401 body %s, want exactly {code: UNAUTHENTICATED, message, auditId}", r.Raw)
					}
					auditIDs = append(auditIDs, id)
					noToken(t, "the 401 body", r.Raw, a.token)

					rec := g.get("/v1/audit/"+id, admin)
					expect(t, rec, http.StatusOK)
					reasons, _ := rec.Body["reasons"].([]any)
					if str(rec.Body, "decision") != "unauthenticated" || str(rec.Body, "capability") != s.route || len(reasons) != 1 ||
						str(reasons[0].(map[string]any), "code") != "UNAUTHENTICATED" || str(reasons[0].(map[string]any), "detail") != a.reason {
						t.Errorf("audit record %s, want decision unauthenticated on %s with reason %s", rec.Raw, s.route, a.reason)
					}
					noToken(t, "the audit record", rec.Raw, a.token)
				})
			}
		}
		// The log names every attempt (so it is the log that would leak), and no token.
		logs := g.logs.Bytes()
		for _, id := range auditIDs {
			if !bytes.Contains(logs, []byte(id)) {
				t.Errorf("the gateway log does not name the attempt %s", id)
			}
		}
		for _, a := range attempts {
			noToken(t, "the gateway log ("+a.name+")", logs, a.token)
		}
	})
}

// noToken fails if hay holds token or any of its non-empty segments.
func noToken(t *testing.T, where string, hay []byte, token string) {
	t.Helper()
	if token == "" {
		return
	}
	for _, part := range append(strings.Split(token, "."), token) {
		if part != "" && bytes.Contains(hay, []byte(part)) {
			t.Errorf("%s holds the token (segment %.20s…)", where, part)
		}
	}
}

// forgeSignature changes one byte of the token's signature.
func forgeSignature(t *testing.T, token string) string {
	t.Helper()
	head, sig, ok := cutLast(token)
	if !ok {
		t.Fatalf("not a JWS: %.20s…", token)
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0xff
	return head + "." + base64.RawURLEncoding.EncodeToString(raw)
}

func cutLast(token string) (string, string, bool) {
	i := strings.LastIndexByte(token, '.')
	if i < 0 {
		return "", "", false
	}
	return token[:i], token[i+1:], true
}

// segments decodes a token's header and claims.
func segments(t *testing.T, token string) (header, claims map[string]any) {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWS: %.20s…", token)
	}
	for i, dst := range []*map[string]any{&header, &claims} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			t.Fatal(err)
		}
	}
	return header, claims
}

// algNone is token's header and claims with alg "none" and no signature.
func algNone(t *testing.T, token string) string {
	t.Helper()
	header, claims := segments(t, token)
	header["alg"] = "none"
	enc := func(v any) string {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(raw)
	}
	return enc(header) + "." + enc(claims) + "."
}

// expiredToken signs token's claims again with the gateway's development key (read from its
// data dir, as its operator could), issued three minutes ago and expired two minutes ago:
// well past the verifier's leeway, without waiting for it.
func expiredToken(t *testing.T, g *gateway, token string) string {
	t.Helper()
	return resigned(t, g, token, func(header, claims map[string]any) {
		now := time.Now()
		claims["iat"] = now.Add(-3 * time.Minute).Unix()
		claims["nbf"] = now.Add(-3 * time.Minute).Unix()
		claims["exp"] = now.Add(-2 * time.Minute).Unix()
	})
}

// resigned is token with its header and claims changed by edit, signed again with the
// development issuer's key under g's data directory: a token the issuer could have minted.
func resigned(t *testing.T, g *gateway, token string, edit func(header, claims map[string]any)) string {
	t.Helper()
	header, claims := segments(t, token)
	pemBytes, err := os.ReadFile(filepath.Join(g.DataDir, "issuer", "signing-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		t.Fatal("the issuer key is not PEM")
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	edit(header, claims)
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims(claims))
	for k, v := range header {
		if k != "alg" {
			tok.Header[k] = v
		}
	}
	signed, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return signed
}
