package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"

	"github.com/xemahq/xema/internal/exchange/exchangetest"
)

// TestTokenExchangeForTheCaller runs the gateway with --token-exchange naming a provider:
// an agent's call for a person reaches the provider with a token of the authorization
// server (a real RFC 8693 server, zitadel/oidc's op, in this process) whose sub is the
// person and act the gateway, then the agent; a second call uses the cached token; the authorization server refusing is
// TOKEN_EXCHANGE_FAILED, audited, with nothing sent to the provider.
func TestTokenExchangeForTheCaller(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		as := exchangetest.Start(t)
		keys, err := keyfunc.NewDefaultCtx(context.Background(), []string{as.JWKSURL})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var got []jwt.MapClaims
		prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			claims := jwt.MapClaims{}
			if _, err := jwt.ParseWithClaims(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), claims, keys.Keyfunc); err != nil {
				http.Error(w, `{"error":"not a token of the authorization server"}`, http.StatusUnauthorized)
				return
			}
			mu.Lock()
			got = append(got, claims)
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"commentId":"c1"}`))
		}))
		t.Cleanup(prov.Close)

		dir := t.TempDir()
		secret := filepath.Join(dir, "client-secret")
		if err := os.WriteFile(secret, []byte(exchangetest.ClientSecret), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, _ := json.Marshal(map[string]any{"providers": []any{map[string]any{"url": prov.URL, "auth": map[string]any{
			"kind": "token-exchange", "tokenEndpoint": as.TokenEndpoint, "clientId": exchangetest.ClientID,
			"clientSecretFile": secret, "audience": "tickets", "subject": "caller", "actor": "gateway"}}}})
		cfgPath := filepath.Join(dir, "token-exchange.json")
		if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
			t.Fatal(err)
		}
		g := startGateway(t, e.store(t), "--token-exchange", cfgPath)
		if err := as.Trust(context.Background(), g.URL+"/.well-known/jwks.json"); err != nil {
			t.Fatal(err)
		}
		admin := g.adminToken()
		sub := g.install(admin, criticalBiome(t, prov.URL)) // comment.add is delegable there
		expect(t, g.grantCustomized(admin, sub, map[string]any{commentRef: map[string]any{"requiresApproval": false}}), http.StatusCreated)
		forAnn := g.token("--subject", "user:ann", "--env", "project", "--act", "agent:support-bot")

		r := g.post("/v1/capabilities/invoke", forAnn, commentCall())
		expect(t, r, http.StatusOK)
		mu.Lock()
		c := got[len(got)-1]
		mu.Unlock()
		act, _ := c["act"].(map[string]any)
		agent, _ := act["act"].(map[string]any)
		aud, _ := c.GetAudience()
		if c["sub"] != "user:ann" || act["sub"] != "service:xema-gateway" || agent["sub"] != "agent:support-bot" || !slices.Contains(aud, "tickets") {
			t.Fatalf("the provider's token %v: want sub user:ann, act.sub the gateway, act.act.sub agent:support-bot, aud tickets", c)
		}
		expect(t, g.post("/v1/capabilities/invoke", forAnn, commentCall()), http.StatusOK)
		if n := as.Exchanges(); n != 1 {
			t.Fatalf("two calls made %d exchanges; want the second to use the cached token", n)
		}

		as.Refuse("invalid_grant")
		bob := g.token("--subject", "user:bob", "--env", "project")
		r = g.post("/v1/capabilities/invoke", bob, commentCall())
		if r.Status != http.StatusBadGateway || str(r.Body, "code") != "TOKEN_EXCHANGE_FAILED" || !strings.Contains(str(r.Body, "message"), "invalid_grant") {
			t.Fatalf("a refused exchange: %d %s; want 502 TOKEN_EXCHANGE_FAILED naming invalid_grant", r.Status, r.Raw)
		}
		if strings.Contains(string(r.Raw), bob) {
			t.Fatal("the answer quotes the caller's token")
		}
		mu.Lock()
		calls := len(got)
		mu.Unlock()
		if calls != 2 {
			t.Fatalf("the provider got %d calls; the refused exchange must send nothing", calls)
		}
		rec := g.get("/v1/audit/"+str(r.Body, "auditId")+".outcome", admin)
		if str(rec.Body, "outcome") != "TOKEN_EXCHANGE_FAILED" {
			t.Fatalf("the refused call's outcome record %s", rec.Raw)
		}
		if strings.Contains(g.logs.String(), bob) {
			t.Fatal("the gateway logged the caller's token")
		}
	})
}
