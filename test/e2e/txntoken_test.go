package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
)

// txnProvider is a provider of a critical operation, written as a provider's team would with
// a stock JOSE library (golang-jwt and keyfunc, the gateway's JWKS): it refuses a call whose
// Txn-Token does not verify (signature, typ, audience, exp), whose txn it has seen before, or
// whose input hash is not the body's. It keeps the claims of each token it accepted.
type txnProvider struct {
	*httptest.Server
	jwksURL string
	mu      sync.Mutex
	seen    map[string]bool
	claims  []jwt.MapClaims
	refused []string
	raw     []string
}

func newTxnProvider(t *testing.T, jwksURL string) *txnProvider {
	p := &txnProvider{jwksURL: jwksURL, seen: map[string]bool{}}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.Close)
	return p
}

func (p *txnProvider) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	claims, err := p.verify(r.Header.Get("Txn-Token"), body)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.raw = append(p.raw, r.Header.Get("Txn-Token"))
	if err != nil {
		p.refused = append(p.refused, err.Error())
		http.Error(w, `{"error":"`+err.Error()+`"}`, http.StatusUnauthorized)
		return
	}
	p.claims = append(p.claims, claims)
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"commentId":"c1"}`)
}

func (p *txnProvider) verify(tok string, body []byte) (jwt.MapClaims, error) {
	if tok == "" {
		return nil, fmt.Errorf("no Txn-Token")
	}
	keys, err := keyfunc.NewDefaultCtx(context.Background(), []string{p.jwksURL})
	if err != nil {
		return nil, fmt.Errorf("jwks: %v", err)
	}
	claims := jwt.MapClaims{}
	parsed, err := jwt.ParseWithClaims(tok, claims, keys.Keyfunc, jwt.WithValidMethods([]string{"EdDSA"}),
		jwt.WithAudience("xema-provider:"+p.URL), jwt.WithExpirationRequired(), jwt.WithIssuedAt())
	if err != nil {
		return nil, fmt.Errorf("verify: %v", err)
	}
	if parsed.Header["typ"] != "txntoken+jwt" {
		return nil, fmt.Errorf("typ %v", parsed.Header["typ"])
	}
	exp, _ := claims.GetExpirationTime()
	iat, _ := claims.GetIssuedAt()
	if exp.Sub(iat.Time) > time.Minute {
		return nil, fmt.Errorf("lives %s", exp.Sub(iat.Time))
	}
	txn, _ := claims["txn"].(string)
	p.mu.Lock()
	replayed := txn == "" || p.seen[txn]
	p.seen[txn] = true
	p.mu.Unlock()
	if replayed {
		return nil, fmt.Errorf("txn %q replayed", txn)
	}
	tctx, _ := claims["tctx"].(map[string]any)
	if want := fmt.Sprintf("sha256:%x", sha256.Sum256(body)); tctx["inputHash"] != want {
		return nil, fmt.Errorf("input hash %v, body hashes to %s", tctx["inputHash"], want)
	}
	return claims, nil
}

func (p *txnProvider) last(t *testing.T) jwt.MapClaims {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.claims) == 0 {
		t.Fatalf("the provider accepted no call (refused: %v)", p.refused)
	}
	return p.claims[len(p.claims)-1]
}

// criticalBiome is the ticketing biome with ticket:comment.add@1 declaring the
// critical-operation projection (and delegable).
func criticalBiome(t *testing.T, url string) string {
	t.Helper()
	dir := biomeDir(t, "ticketing", url)
	path := filepath.Join(dir, "contributions", "comment.capability.contribution.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	m := c["manifest"].(map[string]any)
	m["trustedContextProjection"] = map[string]any{"schemaVersion": 1, "profile": "critical-operation-v1", "delivery": "server-envelope"}
	m["delegable"] = true
	out, _ := json.Marshal(c)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestTxnTokenOfACriticalOperation: a capability declaring trustedContextProjection sends its
// provider, with every call, a Txn-Token the provider verifies against the gateway's JWKS: the
// audit id as txn, the person as sub and the agent as act.sub of a delegated call, the
// capability as scope, the trusted context (org, environment, input hash, risk tier) and, for
// a held call, the approval that released it. A replayed or altered token is refused by the
// provider; a capability without the declaration sends nothing; after `xema keys rotate
// txn-token-signing` and a restart the old key is still published.
func TestTxnTokenOfACriticalOperation(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		prov := newTxnProvider(t, g.URL+"/.well-known/jwks.json")
		admin := g.adminToken()
		sub := g.install(admin, criticalBiome(t, prov.URL))
		forAnn := g.token("--subject", "user:ann", "--org-role", "org_member", "--env", "project", "--act", "agent:support-bot")

		r := g.post("/v1/capabilities/invoke", forAnn, commentCall())
		expect(t, r, http.StatusOK)
		c := prov.last(t)
		tctx, _ := c["tctx"].(map[string]any)
		act, _ := c["act"].(map[string]any)
		if c["txn"] != str(r.Body, "auditId") || c["sub"] != "user:ann" || act["sub"] != "agent:support-bot" ||
			c["scope"] != commentRef || tctx["org"] != "default" || tctx["environment"] != "project" || tctx["riskTier"] != "medium" {
			t.Fatalf("Txn-Token claims %v: want txn = the audit id, sub user:ann, act.sub agent:support-bot, the trusted context", c)
		}

		// The provider refuses a replayed token and an altered one.
		prov.mu.Lock()
		first := prov.raw[len(prov.raw)-1]
		prov.mu.Unlock()
		body, _ := json.Marshal(commentCall()["input"])
		for name, tok := range map[string]string{"replayed": first, "altered": first[:len(first)-4] + "AAAA"} {
			req, _ := http.NewRequest(http.MethodPost, prov.URL+"/comment", strings.NewReader(string(body)))
			req.Header.Set("Txn-Token", tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("a %s Txn-Token was accepted by the provider", name)
			}
		}
		// Without the declaration nothing is sent (this provider then refuses the call).
		g.post("/v1/capabilities/invoke", g.token("--subject", "agent:support-bot", "--env", "project"),
			map[string]any{"ref": "ticket:find@1", "input": map[string]any{"customerEmail": "ada@example.com"}})
		prov.mu.Lock()
		if n := len(prov.raw); n != 4 || prov.raw[3] != "" { // the call, the replayed and altered tokens, find
			t.Errorf("ticket:find@1, which declares no projection: the provider got %d calls, the last with Txn-Token %.20q", n, prov.raw[n-1])
		}
		prov.refused = nil // the refusals just asked for
		prov.mu.Unlock()

		// A held call's token names the approval that released it.
		expect(t, g.grantCustomized(admin, sub, map[string]any{commentRef: map[string]any{"requiresApproval": true}}), http.StatusCreated)
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		held := g.post("/v1/capabilities/invoke", bot, commentCall())
		expect(t, held, http.StatusAccepted)
		expect(t, g.post("/v1/approvals/"+str(held.Body, "approvalId")+"/approve", admin, map[string]any{}), http.StatusOK)
		c = prov.last(t)
		approval, _ := c["tctx"].(map[string]any)["approval"].(map[string]any)
		if c["sub"] != "agent:support-bot" || c["act"] != nil || approval["by"] != "user:alice" || approval["id"] != str(held.Body, "approvalId") {
			t.Fatalf("the approved call's Txn-Token %v: want sub agent:support-bot, no act, the approval by user:alice", c)
		}
		prov.mu.Lock()
		refused := len(prov.refused)
		prov.mu.Unlock()
		if refused != 0 {
			t.Fatalf("the provider refused a gateway call's Txn-Token: %v", prov.refused)
		}

		// Rotation: the new key signs after a restart, the old one is still published.
		jwks := func() string { return string(g.get("/.well-known/jwks.json", "").Raw) }
		before := jwks()
		g.stop()
		if out, code := g.cli(t, append([]string{"keys", "rotate", "txn-token-signing"}, g.storeArgs()...)...); code != 0 {
			t.Fatalf("keys rotate: exit %d: %s", code, out)
		}
		g.start()
		after := jwks()
		var set struct {
			Keys []struct{ Kid, Kty string } `json:"keys"`
		}
		if err := json.Unmarshal([]byte(after), &set); err != nil {
			t.Fatal(err)
		}
		okp, kept := 0, 0
		for _, k := range set.Keys {
			if k.Kty == "OKP" {
				okp++
				if strings.Contains(before, k.Kid) {
					kept++
				}
			}
		}
		if okp != 2 || kept != 1 {
			t.Fatalf("JWKS after rotation %s: want the new and the old Txn-Token key (before: %s)", after, before)
		}
	})
}
