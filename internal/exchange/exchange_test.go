package exchange

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"

	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/exchange/exchangetest"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/runner"
)

// downstream is a provider that accepts only tokens of the authorization server (its JWKS)
// and records the claims of each.
type downstream struct {
	*httptest.Server
	mu     sync.Mutex
	claims []jwt.MapClaims
}

func newDownstream(t testing.TB, jwksURL string) *downstream {
	k, err := keyfunc.NewDefaultCtx(context.Background(), []string{jwksURL})
	if err != nil {
		t.Fatal(err)
	}
	d := &downstream{}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		claims := jwt.MapClaims{}
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if _, err := jwt.ParseWithClaims(tok, claims, k.Keyfunc); err != nil {
			http.Error(w, `{"error":"bad token"}`, http.StatusUnauthorized)
			return
		}
		d.mu.Lock()
		d.claims = append(d.claims, claims)
		d.mu.Unlock()
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *downstream) calls() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.claims)
}

type rig struct {
	as    *exchangetest.Server
	prov  *downstream
	iss   *identity.Issuer
	ver   *identity.Verifier
	src   *Source
	now   time.Time
	clock sync.Mutex
}

func newRig(t testing.TB) *rig {
	t.Helper()
	ctx := context.Background()
	iss, err := identity.OpenIssuer(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	jwks := httptest.NewServer(iss.JWKSHandler())
	t.Cleanup(jwks.Close)
	as := exchangetest.Start(t)
	if err := as.Trust(ctx, jwks.URL); err != nil {
		t.Fatal(err)
	}
	prov := newDownstream(t, as.JWKSURL)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(exchangetest.ClientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "te.json")
	cfg, _ := json.Marshal(Config{Providers: []Provider{{URL: prov.URL, Auth: Auth{Kind: Kind, TokenEndpoint: as.TokenEndpoint,
		ClientID: exchangetest.ClientID, ClientSecretFile: secret, Audience: "payments", Scopes: []string{"openid"},
		Subject: SubjectCaller, Actor: ActorGateway}}}})
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(cfgPath, credentialURL(egress.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})))
	if err != nil {
		t.Fatal(err)
	}
	src, err := New(ctx, c, identity.NewDevServiceTokens(iss), http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	ver, err := identity.NewVerifier(ctx, iss.VerifierConfig())
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{as: as, prov: prov, iss: iss, ver: ver, src: src, now: time.Now()}
	src.now = func() time.Time { r.clock.Lock(); defer r.clock.Unlock(); return r.now }
	return r
}

func (r *rig) advance(d time.Duration) { r.clock.Lock(); r.now = r.now.Add(d); r.clock.Unlock() }

// caller is the context the edge builds for a verified token of c.
func (r *rig) caller(t testing.TB, c identity.DevClaims) context.Context {
	t.Helper()
	c.Environment, c.TTL = "project", time.Hour
	tok, err := r.iss.Mint(c)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := r.ver.Verify(context.Background(), tok)
	if err != nil {
		t.Fatal(err)
	}
	return identity.WithVerified(context.Background(), ec, tok)
}

func (r *rig) call(ctx context.Context) error {
	_, err := runner.HTTP{Client: http.DefaultClient, URL: r.prov.URL, Tokens: r.src}.Run(ctx, kernel.Call{Ref: "pay:transfer@1", Input: []byte(`{}`)})
	return err
}

// TestExchangeForTheCaller: the provider receives a token of the authorization server whose
// sub is the person, whose act is the gateway (and before it the agent acting for the
// person), for its audience; a second call uses the cache; an entry near its expiry is
// exchanged again; concurrent calls share one exchange.
func TestExchangeForTheCaller(t *testing.T) {
	r := newRig(t)
	ann := r.caller(t, identity.DevClaims{Subject: "user:ann", Actors: []string{"agent:bot"}})
	if err := r.call(ann); err != nil {
		t.Fatal(err)
	}
	c := r.prov.claims[0]
	act, _ := c["act"].(map[string]any)
	prior, _ := act["act"].(map[string]any)
	aud, _ := c.GetAudience()
	if c["sub"] != "user:ann" || act["sub"] != "service:xema-gateway" || prior["sub"] != "agent:bot" || !contains(aud, "payments") {
		t.Fatalf("downstream token claims %v: want sub user:ann, act.sub the gateway, act.act.sub agent:bot, aud payments", c)
	}
	if err := r.call(ann); err != nil || r.as.Exchanges() != 1 {
		t.Fatalf("second call: %v, %d exchanges; want the cached token", err, r.as.Exchanges())
	}
	r.advance(5 * time.Minute) // the server's tokens live 5 min: now within the refresh margin
	if err := r.call(ann); err != nil || r.as.Exchanges() != 2 {
		t.Fatalf("after expiry: %v, %d exchanges; want one more", err, r.as.Exchanges())
	}
	r.advance(5 * time.Minute)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := r.call(ann); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := r.as.Exchanges(); n != 3 {
		t.Fatalf("8 concurrent calls made %d exchanges; want them to share one", n-2)
	}
	bob := r.caller(t, identity.DevClaims{Subject: "user:bob"})
	if err := r.call(bob); err != nil || r.as.Exchanges() != 4 || r.prov.claims[len(r.prov.claims)-1]["sub"] != "user:bob" {
		t.Fatalf("another person's call: %v; want its own exchange", err)
	}
}

// TestExchangeRefusedFailsClosed: a refusal of the server (its error code passed on), a
// subject whose may_act does not name the gateway, and a call with no inbound token (a held
// call run later) are TOKEN_EXCHANGE_FAILED, not run, and the provider is never called.
func TestExchangeRefusedFailsClosed(t *testing.T) {
	r := newRig(t)
	cases := []struct {
		name, refuse, want string
		ctx                func() context.Context
	}{
		{"invalid_grant", "invalid_grant", "invalid_grant", func() context.Context { return r.caller(t, identity.DevClaims{Subject: "user:ann"}) }},
		{"unauthorized_client", "unauthorized_client", "unauthorized_client", func() context.Context {
			return r.caller(t, identity.DevClaims{Subject: "user:ann"})
		}},
		{"may_act excludes the gateway", "", "invalid_grant", func() context.Context {
			return r.caller(t, identity.DevClaims{Subject: "user:carol", MayAct: []string{"agent:other"}})
		}},
		{"no inbound token", "", "no inbound token", func() context.Context {
			ec, _ := identity.CallerOf(r.caller(t, identity.DevClaims{Subject: "user:dave"}))
			return identity.WithCaller(context.Background(), ec)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r.as.Refuse(tc.refuse)
			ctx := tc.ctx()
			sub, _ := identity.SubjectTokenOf(ctx)
			err := r.call(ctx)
			var fe *fault.Error
			if !errors.As(err, &fe) || fe.Code != CodeFailed || !fe.NotRun || !strings.Contains(fe.Message, tc.want) {
				t.Fatalf("err = %#v; want %s, not run, naming %q", err, CodeFailed, tc.want)
			}
			if sub != "" && strings.Contains(err.Error(), sub) {
				t.Fatal("the error quotes the caller's token")
			}
			if r.prov.calls() != 0 {
				t.Fatal("the provider was called")
			}
		})
	}
}

func TestLoadRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	_ = os.WriteFile(secret, []byte("s"), 0o600)
	good := `{"url": "https://pay.example", "auth": {"kind": "token-exchange", "tokenEndpoint": "https://idp.example/token", "clientId": "c", "clientSecretFile": "` + secret + `", "subject": "caller", "actor": "gateway"}}`
	cases := map[string]struct{ doc, want string }{
		"unknown field":      {`{"providers": [], "extra": 1}`, "unknown field"},
		"http endpoint":      {strings.Replace(good, "https://idp", "http://idp", 1), "tokenEndpoint"},
		"subject connection": {strings.Replace(good, `"caller"`, `"connection"`, 1), "connections are not built"},
		"actor":              {strings.Replace(good, `"gateway"`, `"someone"`, 1), "auth.actor"},
		"kind":               {strings.Replace(good, "token-exchange", "oauth", 1), "auth.kind"},
		"no secret file":     {strings.Replace(good, secret, filepath.Join(dir, "nope"), 1), "clientSecretFile"},
		"bad url":            {strings.Replace(good, "https://pay.example", "pay", 1), "url"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			doc := tc.doc
			if !strings.HasPrefix(doc, `{"providers"`) {
				doc = `{"providers": [` + doc + `]}`
			}
			p := filepath.Join(dir, name+".json")
			_ = os.WriteFile(p, []byte(doc), 0o600)
			if _, err := Load(p, credentialURL(egress.New(nil))); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("Load = %v; want an error naming %s and %q", err, p, tc.want)
			}
		})
	}
}

// credentialURL is p's check of a URL that receives a credential, as the app passes it.
func credentialURL(p *egress.Policy) func(string) string {
	return func(raw string) string { return p.CheckURL(raw, true) }
}

func contains(xs []string, x string) bool {
	for _, e := range xs {
		if e == x {
			return true
		}
	}
	return false
}

// BenchmarkCachedToken is what a call whose token comes from a cached exchange pays: the
// caller's key and one lookup (the funnel's own CPU a call is ~300-400 µs; BENCHMARKS.md).
func BenchmarkCachedToken(b *testing.B) {
	r := newRig(b)
	ctx := r.caller(b, identity.DevClaims{Subject: "user:ann", Actors: []string{"agent:bot"}})
	aud := runner.Audience(r.prov.URL)
	if _, err := r.src.Token(ctx, aud); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.src.Token(ctx, aud); err != nil {
			b.Fatal(err)
		}
	}
	if r.as.Exchanges() != 1 {
		b.Fatalf("%d exchanges", r.as.Exchanges())
	}
}
