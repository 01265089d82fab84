package connection_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/connection/connectiontest"
	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/identity/hydratest"
	"github.com/xemahq/xema/internal/secretbox"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/sqlite"
)

const org = "acme"

// clock is the service's clock: the wall clock, moved by the test.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

// counter counts the outbound requests by method and path.
type counter struct {
	rt     http.RoundTripper
	mu     sync.Mutex
	counts map[string]int
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.counts[r.Method+" "+r.URL.Path]++
	c.mu.Unlock()
	return c.rt.RoundTrip(r)
}

func (c *counter) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[key]
}

// keySpec is one fresh key named id, as a keyring spec entry.
func keySpec(id string) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return id + "=" + base64.StdEncoding.EncodeToString(b)
}

func parseKeyring(t *testing.T, spec string) *secretbox.Keyring {
	t.Helper()
	kr, err := secretbox.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

func newKeyring(t *testing.T) *secretbox.Keyring { return parseKeyring(t, keySpec("k1")) }

// client is the outbound client as the gateway makes it: through the egress policy, no
// redirect followed, counted.
func client(policy *egress.Policy) (*http.Client, *counter) {
	c := &counter{rt: policy.Transport(), counts: map[string]int{}}
	return &http.Client{Transport: c, CheckRedirect: egress.NoRedirect}, c
}

func newService(t *testing.T, st connection.Store, kr *secretbox.Keyring, hc *http.Client, now func() time.Time) *connection.Service {
	t.Helper()
	svc, err := connection.New(connection.Config{Store: st, Keyring: func() (*secretbox.Keyring, error) { return kr, nil },
		HTTP: hc, PublicURL: "https://gateway.example", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// env is one hydra, one protected MCP server and the service, shared by the subtests of
// TestWithHydra (starting hydra costs seconds).
type env struct {
	hydra *hydratest.Server
	mcp   *connectiontest.Server
	st    store.Store
	spec  string // the keyring's
	kr    *secretbox.Keyring
	svc   *connection.Service
	clock *clock
	calls *counter

	mu     sync.Mutex
	tokens []string // every token the service held
	shown  []string // every error message and view, as shown
}

func (e *env) show(t *testing.T, v any, err error) {
	t.Helper()
	b, jerr := json.Marshal(v)
	if jerr != nil {
		t.Fatal(jerr)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.shown = append(e.shown, string(b))
	if err != nil {
		fe := fault.Of(err)
		eb, _ := json.Marshal(fe)
		e.shown = append(e.shown, err.Error(), string(eb))
	}
}

func (e *env) register(t *testing.T, providerID string, srv connection.Server) {
	t.Helper()
	saveServer(t, e.st, providerID, srv)
}

// saveServer stores an MCP server of org with auth oauth and srv as what discovery found.
func saveServer(t *testing.T, st store.Store, providerID string, srv connection.Server) {
	t.Helper()
	raw, err := json.Marshal(srv)
	if err != nil {
		t.Fatal(err)
	}
	// The server's biome (no tools) claims the provider id for the org, as a registration does.
	bv := store.BiomeVersion{ID: providerID, Version: "1.0.1", Manifest: json.RawMessage(`{"id":"` + providerID + `"}`),
		Contributions: json.RawMessage(`[]`), ContentHash: "sha256:" + providerID, CreatedAt: time.Now(), Owner: org}
	if err := st.SaveMCPServer(t.Context(), store.MCPServer{ProviderID: providerID, Transport: "streamable-http", URL: srv.Resource,
		Auth: "oauth", OAuth: raw, TimeoutMs: 5000, Generation: 1, Org: org, RegisteredBy: "user:admin", RegisteredAt: time.Now()},
		bv, nil, nil); err != nil {
		t.Fatal(err)
	}
}

// newStore is a real SQLite store in the test's temp dir.
func newStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// connect runs the whole flow as login's person and returns the connection.
func (e *env) connect(t *testing.T, providerID string, owner connection.Owner, login string) connection.View {
	t.Helper()
	ctx := t.Context()
	started, err := e.svc.Start(ctx, org, providerID, owner, "user:"+login)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	q := e.hydra.Authorize(t, started.URL, login).Query()
	v, err := e.svc.Complete(ctx, q.Get("state"), q.Get("code"), q.Get("error"), q.Get("error_description"))
	e.show(t, v, err)
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	e.held(t, owner, providerID)
	return v
}

// held opens the tokens the store holds for owner's connection (and remembers them).
func (e *env) held(t *testing.T, owner connection.Owner, providerID string) (access, refresh string, c store.Connection) {
	t.Helper()
	c, err := e.st.GetConnection(t.Context(), org, providerID, owner.Kind, owner.Ref)
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.kr.Open(c.AccessSealed, connection.TokenAAD("access", c))
	if err != nil {
		t.Fatal(err)
	}
	var r []byte
	if c.RefreshSealed != "" {
		if r, err = e.kr.Open(c.RefreshSealed, connection.TokenAAD("refresh", c)); err != nil {
			t.Fatal(err)
		}
	}
	e.mu.Lock()
	e.tokens = append(e.tokens, string(a), string(r))
	e.mu.Unlock()
	return string(a), string(r), c
}

func wantCode(t *testing.T, err error, code string) *fault.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", code)
	}
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Code != code {
		t.Fatalf("error %v, want %s", err, code)
	}
	return fe
}

func user(ref string) connection.Owner { return connection.Owner{Kind: store.OwnerUser, Ref: ref} }

var persons = map[string]hydratest.Person{
	"alice":    {Subject: "alice"},
	"bob":      {Subject: "bob"},
	"carol":    {Subject: "carol"},
	"dave":     {Subject: "dave"},
	"erin":     {Subject: "erin"},
	"frank":    {Subject: "frank"},
	"declines": {Subject: "declines", Refuse: true},
}

// TestWithHydra runs the connections against a real hydra (dynamic client registration on)
// and a real protected MCP server whose tokens it issues.
func TestWithHydra(t *testing.T) {
	h := hydratest.StartWithLogin(t, persons, hydratest.DynamicRegistration()...)
	e := &env{hydra: h, mcp: connectiontest.Start(t, h), st: newStore(t), spec: keySpec("k1"), clock: &clock{}}
	e.kr = parseKeyring(t, e.spec)
	var hc *http.Client
	hc, e.calls = client(egress.New(egress.Loopback()))
	e.svc = newService(t, e.st, e.kr, hc, e.clock.now)
	ctx := t.Context()

	var srv connection.Server
	t.Run("discover registers a client", func(t *testing.T) {
		var err error
		srv, err = e.svc.Discover(ctx, e.mcp.URL, connection.Auth{Owner: store.OwnerUser})
		if err != nil {
			t.Fatal(err)
		}
		if !srv.Registered || srv.ClientID == "" || srv.TokenAuthMethod != "none" || srv.ClientSecretSealed != "" {
			t.Errorf("client: %+v", srv)
		}
		if srv.Issuer != h.Issuer || srv.Resource != e.mcp.URL || srv.TokenEndpoint != h.TokenURL() ||
			srv.RevocationEndpoint != h.PublicURL+"/oauth2/revoke" || srv.RegistrationEndpoint != h.RegistrationURL() {
			t.Errorf("endpoints: %+v", srv)
		}
		if !slices.Contains(srv.Scopes, "offline_access") {
			t.Errorf("scopes %v lack offline_access, which hydra advertises", srv.Scopes)
		}
		if n := e.calls.count("POST /oauth2/register"); n != 1 {
			t.Errorf("%d registrations, want 1", n)
		}
	})
	if srv.ClientID == "" {
		t.FailNow()
	}
	e.register(t, "tools", srv)
	orgSrv := srv
	orgSrv.Owner = store.OwnerOrg
	e.register(t, "orgtools", orgSrv)

	t.Run("discover with a client id", func(t *testing.T) {
		c := h.CreatePublicClient(t, e.svc.RedirectURI())
		before := e.calls.count("POST /oauth2/register")
		got, err := e.svc.Discover(ctx, e.mcp.URL, connection.Auth{Owner: store.OwnerOrg, ClientID: c.ID, Scopes: []string{"openid"}})
		if err != nil {
			t.Fatal(err)
		}
		if got.Registered || got.ClientID != c.ID || got.TokenAuthMethod != "none" || got.Owner != store.OwnerOrg {
			t.Errorf("client: %+v", got)
		}
		if !slices.Equal(got.Scopes, []string{"openid", "offline_access"}) {
			t.Errorf("scopes %v, want openid offline_access", got.Scopes)
		}
		if e.calls.count("POST /oauth2/register") != before {
			t.Error("registered a client although given one")
		}
		withSecret, err := e.svc.Discover(ctx, e.mcp.URL, connection.Auth{Owner: store.OwnerOrg, ClientID: c.ID, ClientSecret: "s3cret-value"})
		if err != nil {
			t.Fatal(err)
		}
		if withSecret.TokenAuthMethod != "client_secret_basic" || withSecret.ClientSecretSealed == "" || withSecret.KeyID != e.kr.KeyID() {
			t.Errorf("client with a secret: %+v", withSecret)
		}
		b, _ := json.Marshal(withSecret)
		if strings.Contains(string(b), "s3cret-value") {
			t.Errorf("the server record holds the secret in clear: %s", b)
		}
	})

	t.Run("discover without a challenge finds the well-known metadata", func(t *testing.T) {
		quiet := connectiontest.Start(t, h, connectiontest.WithoutChallenge(), connectiontest.WithScopes("openid"))
		got, err := e.svc.Discover(ctx, quiet.URL, connection.Auth{Owner: store.OwnerUser, ClientID: "given"})
		if err != nil {
			t.Fatal(err)
		}
		if got.Resource != quiet.URL || !slices.Equal(got.Scopes, []string{"openid", "offline_access"}) {
			t.Errorf("got %+v", got)
		}
	})

	t.Run("connect", func(t *testing.T) {
		started, err := e.svc.Start(ctx, org, "tools", user("alice"), "user:alice")
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(started.URL)
		q := u.Query()
		for k, want := range map[string]string{"response_type": "code", "client_id": srv.ClientID, "redirect_uri": e.svc.RedirectURI(),
			"code_challenge_method": "S256", "resource": e.mcp.URL, "scope": strings.Join(srv.Scopes, " ")} {
			if q.Get(k) != want {
				t.Errorf("authorization URL's %s = %q, want %q", k, q.Get(k), want)
			}
		}
		if q.Get("state") == "" || q.Get("code_challenge") == "" {
			t.Errorf("authorization URL without state or challenge: %s", started.URL)
		}
		landed := h.Authorize(t, started.URL, "alice").Query()
		v, err := e.svc.Complete(ctx, landed.Get("state"), landed.Get("code"), landed.Get("error"), landed.Get("error_description"))
		e.show(t, v, err)
		if err != nil {
			t.Fatal(err)
		}
		if v.Status != connection.StatusConnected || v.Owner != user("alice") || v.ProviderID != "tools" || v.CreatedBy != "user:alice" || v.ExpiresAt == "" {
			t.Errorf("view %+v", v)
		}
		e.held(t, user("alice"), "tools")
		e.connect(t, "tools", user("bob"), "bob")
		e.connect(t, "orgtools", connection.Owner{Kind: store.OwnerOrg}, "carol")

		for _, c := range []struct {
			provider string
			owner    connection.Owner
			want     string
		}{{"tools", user("alice"), "alice"}, {"tools", user("bob"), "bob"}, {"orgtools", connection.Owner{Kind: store.OwnerOrg}, "carol"}} {
			tok, v, err := e.svc.Token(ctx, org, c.provider, c.owner)
			e.show(t, v, err)
			if err != nil {
				t.Fatal(err)
			}
			if s := tok.String(); s != "[redacted]" {
				t.Errorf("token prints as %q", s)
			}
			got, err := e.mcp.WhoAmI(ctx, tok.Reveal())
			if err != nil || got != c.want {
				t.Errorf("whoami with %s's token of %v: %q, %v", c.provider, c.owner, got, err)
			}
		}
		if st, err := e.svc.Status(ctx, org, "tools", user("alice")); err != nil || st != connection.StatusConnected {
			t.Errorf("status %q, %v", st, err)
		}
		if st, err := e.svc.Status(ctx, org, "tools", user("nobody")); err != nil || st != connection.StatusMissing {
			t.Errorf("status of nobody %q, %v", st, err)
		}
		_, _, err = e.svc.Token(ctx, org, "tools", user("nobody"))
		e.show(t, nil, err)
		wantCode(t, err, connection.CodeRequired)
		list, err := e.svc.List(ctx, org)
		e.show(t, list, err)
		if err != nil || len(list) != 3 {
			t.Errorf("list: %d, %v", len(list), err)
		}
		// A reconnect replaces the owner's connection.
		e.connect(t, "tools", user("bob"), "bob")
		if list, _ := e.svc.List(ctx, org); len(list) != 3 {
			t.Errorf("after a reconnect, %d connections, want 3", len(list))
		}
	})

	t.Run("start refuses", func(t *testing.T) {
		for _, c := range []struct {
			name, org, provider string
			owner               connection.Owner
			code                string
		}{
			{"unknown provider", org, "nope", user("alice"), connection.CodeUnknownProvider},
			{"another org's provider", "other", "tools", user("alice"), connection.CodeUnknownProvider},
			{"an org connection to a per-person server", org, "tools", connection.Owner{Kind: store.OwnerOrg}, fault.CodeInvalidArgument},
			{"a user without a ref", org, "tools", connection.Owner{Kind: store.OwnerUser}, fault.CodeInvalidArgument},
		} {
			t.Run(c.name, func(t *testing.T) {
				_, err := e.svc.Start(ctx, c.org, c.provider, c.owner, "user:alice")
				wantCode(t, err, c.code)
			})
		}
	})

	t.Run("state", func(t *testing.T) {
		started, err := e.svc.Start(ctx, org, "tools", user("alice"), "user:alice")
		if err != nil {
			t.Fatal(err)
		}
		q := h.Authorize(t, started.URL, "alice").Query()
		if _, err := e.svc.Complete(ctx, q.Get("state"), q.Get("code"), "", ""); err != nil {
			t.Fatal(err)
		}
		e.held(t, user("alice"), "tools")
		_, err = e.svc.Complete(ctx, q.Get("state"), q.Get("code"), "", "")
		e.show(t, nil, err)
		wantCode(t, err, connection.CodeInvalidState) // replayed

		_, err = e.svc.Complete(ctx, "made-up-state", q.Get("code"), "", "")
		wantCode(t, err, connection.CodeInvalidState) // unknown

		started, err = e.svc.Start(ctx, org, "tools", user("alice"), "user:alice")
		if err != nil {
			t.Fatal(err)
		}
		q = h.Authorize(t, started.URL, "bob").Query() // bob lured into completing alice's request
		_, err = e.svc.CompleteAs(ctx, "user:bob", q.Get("state"), q.Get("code"), "", "")
		wantCode(t, err, connection.CodeInvalidState) // another's
		if _, _, c := e.held(t, user("alice"), "tools"); c.CreatedBy != "user:alice" {
			t.Errorf("alice's connection changed: %+v", c)
		}

		started, err = e.svc.Start(ctx, org, "tools", user("alice"), "user:alice")
		if err != nil {
			t.Fatal(err)
		}
		q = h.Authorize(t, started.URL, "alice").Query()
		e.clock.advance(11 * time.Minute)
		_, err = e.svc.Complete(ctx, q.Get("state"), q.Get("code"), "", "")
		e.clock.advance(-11 * time.Minute)
		wantCode(t, err, connection.CodeInvalidState) // expired
	})

	t.Run("refused authorization", func(t *testing.T) {
		started, err := e.svc.Start(ctx, org, "tools", user("declines"), "user:declines")
		if err != nil {
			t.Fatal(err)
		}
		q := h.Authorize(t, started.URL, "declines").Query()
		if q.Get("error") != "access_denied" {
			t.Fatalf("hydra answered %s", q)
		}
		v, err := e.svc.Complete(ctx, q.Get("state"), q.Get("code"), q.Get("error"), q.Get("error_description"))
		e.show(t, v, err)
		fe := wantCode(t, err, connection.CodeAuthorizationFailed)
		if !strings.Contains(fe.Message, "access_denied") {
			t.Errorf("message %q does not name the error", fe.Message)
		}
		if st, _ := e.svc.Status(ctx, org, "tools", user("declines")); st != connection.StatusMissing {
			t.Errorf("status %q after a refused authorization", st)
		}
	})

	t.Run("refresh", func(t *testing.T) {
		e.connect(t, "tools", user("dave"), "dave")
		access, refresh, before := e.held(t, user("dave"), "tools")
		tok, _, err := e.svc.Token(ctx, org, "tools", user("dave"))
		if err != nil || tok.Reveal() != access {
			t.Fatalf("a fresh token is not the one held: %v", err)
		}
		posts := e.calls.count("POST /oauth2/token")
		e.clock.advance(time.Hour) // hydra's access tokens live an hour
		defer e.clock.advance(-time.Hour)
		got := make([]string, 8)
		var wg sync.WaitGroup
		for i := range got {
			wg.Go(func() {
				tok, v, err := e.svc.Token(ctx, org, "tools", user("dave"))
				e.show(t, v, err)
				if err != nil {
					t.Error(err)
					return
				}
				got[i] = tok.Reveal()
			})
		}
		wg.Wait()
		if n := e.calls.count("POST /oauth2/token") - posts; n != 1 {
			t.Errorf("%d refreshes for 8 concurrent calls, want 1", n)
		}
		if slices.Compact(slices.Clone(got))[0] != got[0] || len(slices.Compact(slices.Clone(got))) != 1 {
			t.Errorf("the calls got different tokens")
		}
		newAccess, newRefresh, after := e.held(t, user("dave"), "tools")
		switch {
		case got[0] != newAccess || newAccess == access:
			t.Error("the refreshed token is not the one stored, or not new")
		case newRefresh == refresh || newRefresh == "":
			t.Error("the rotated refresh token was not stored")
		case after.Version != before.Version+1 || after.RefreshedAt.IsZero():
			t.Errorf("version %d → %d, refreshed at %v", before.Version, after.Version, after.RefreshedAt)
		}
		if who, err := e.mcp.WhoAmI(ctx, newAccess); err != nil || who != "dave" {
			t.Errorf("whoami with the refreshed token: %q, %v", who, err)
		}
	})

	t.Run("refresh with the authorization server unreachable", func(t *testing.T) {
		_, _, before := e.held(t, user("dave"), "tools")
		refused, _ := client(egress.New(nil)) // loopback, hence hydra, refused
		other := newService(t, e.st, e.kr, refused, e.clock.now)
		e.clock.advance(2 * time.Hour)
		defer e.clock.advance(-2 * time.Hour)
		_, v, err := other.Token(ctx, org, "tools", user("dave"))
		e.show(t, v, err)
		wantCode(t, err, connection.CodeTokenUnavailable)
		if _, _, after := e.held(t, user("dave"), "tools"); after.Version != before.Version || after.Status != store.ConnectionConnected {
			t.Errorf("the connection changed: %+v", after)
		}
	})

	t.Run("refresh refused", func(t *testing.T) {
		e.connect(t, "tools", user("erin"), "erin")
		h.RevokeConsent(t, "erin")
		e.clock.advance(time.Hour)
		defer e.clock.advance(-time.Hour)
		_, v, err := e.svc.Token(ctx, org, "tools", user("erin"))
		e.show(t, v, err)
		wantCode(t, err, connection.CodeExpired)
		if st, _ := e.svc.Status(ctx, org, "tools", user("erin")); st != connection.StatusNeedsReconnect {
			t.Errorf("status %q, want needs-reconnect", st)
		}
		_, _, err = e.svc.Token(ctx, org, "tools", user("erin"))
		wantCode(t, err, connection.CodeExpired)
	})

	t.Run("no refresh token", func(t *testing.T) {
		once := srv
		once.Scopes = nil // no offline scope: hydra issues no refresh token
		e.register(t, "oncetools", once)
		e.connect(t, "oncetools", user("alice"), "alice")
		if _, refresh, _ := e.held(t, user("alice"), "oncetools"); refresh != "" {
			t.Fatal("hydra issued a refresh token without the offline scope")
		}
		e.clock.advance(time.Hour - 30*time.Second) // within the skew, not yet expired: still usable
		if _, _, err := e.svc.Token(ctx, org, "oncetools", user("alice")); err != nil {
			t.Errorf("a token not yet expired: %v", err)
		}
		e.clock.advance(time.Minute)
		defer e.clock.advance(-time.Hour - 30*time.Second)
		if st, _ := e.svc.Status(ctx, org, "oncetools", user("alice")); st != connection.StatusNeedsReconnect {
			t.Errorf("status %q of an expired connection without a refresh token", st)
		}
		_, _, err := e.svc.Token(ctx, org, "oncetools", user("alice"))
		wantCode(t, err, connection.CodeExpired)
	})

	t.Run("reseal", func(t *testing.T) {
		rotated := parseKeyring(t, keySpec("k2")+","+e.spec)
		n, err := e.st.ResealConnections(ctx, func(c store.Connection) (string, string, string, error) {
			return connection.Reseal(rotated, c)
		})
		if err != nil || n == 0 {
			t.Fatalf("resealed %d: %v", n, err)
		}
		e.kr = rotated
		hc, _ := client(egress.New(egress.Loopback()))
		e.svc = newService(t, e.st, rotated, hc, e.clock.now)
		tok, _, err := e.svc.Token(ctx, org, "tools", user("alice"))
		if err != nil {
			t.Fatal(err)
		}
		if who, err := e.mcp.WhoAmI(ctx, tok.Reveal()); err != nil || who != "alice" {
			t.Errorf("whoami after the rotation: %q, %v", who, err)
		}
		if _, _, c := e.held(t, user("alice"), "tools"); c.KeyID != "k2" {
			t.Errorf("key id %q after the rotation", c.KeyID)
		}
	})

	t.Run("disconnect", func(t *testing.T) {
		v := e.connect(t, "tools", user("frank"), "frank")
		access, refresh, _ := e.held(t, user("frank"), "tools")
		if !h.Active(t, access) || !h.Active(t, refresh) {
			t.Fatal("fresh tokens inactive at hydra")
		}
		got, err := e.svc.Disconnect(ctx, org, v.ID)
		e.show(t, got, err)
		if err != nil {
			t.Fatal(err)
		}
		if got.Revoked == nil || !*got.Revoked || got.ID != v.ID {
			t.Errorf("disconnect answered %+v", got)
		}
		if h.Active(t, refresh) {
			t.Error("the refresh token is still active at hydra")
		}
		if h.Active(t, access) {
			t.Error("the access token is still active at hydra")
		}
		_, _, err = e.svc.Token(ctx, org, "tools", user("frank"))
		wantCode(t, err, connection.CodeRequired)
		_, err = e.svc.Disconnect(ctx, org, v.ID)
		wantCode(t, err, connection.CodeNotFound)
	})

	t.Run("nothing shown holds a token", func(t *testing.T) {
		if len(e.tokens) == 0 || len(e.shown) == 0 {
			t.Fatal("nothing recorded")
		}
		for _, tok := range e.tokens {
			if tok == "" {
				continue
			}
			for _, s := range e.shown {
				if strings.Contains(s, tok) {
					t.Errorf("a token is shown in %s", s)
				}
			}
		}
	})
}

// TestDiscoverRefuses: each broken server or authorization server is refused with a typed
// error naming the field at fault, and nothing is registered anywhere.
func TestDiscoverRefuses(t *testing.T) {
	valid := connectiontest.Metadata
	for _, c := range []struct {
		name   string
		as     func(issuer string) map[string]any
		asAt   string // listen address of the authorization server
		opts   []connectiontest.Option
		auth   connection.Auth
		policy *egress.Policy
		path   string
		says   string
	}{
		{name: "no metadata", as: valid, opts: []connectiontest.Option{connectiontest.WithoutMetadata()},
			path: "/url", says: "no usable protected-resource metadata"},
		{name: "another resource", as: valid, opts: []connectiontest.Option{connectiontest.WithResource("https://elsewhere.example/mcp")},
			path: "/url", says: "names another resource"},
		{name: "another issuer", as: func(iss string) map[string]any { m := valid(iss); m["issuer"] = "https://evil.example"; return m },
			path: "/url", says: "mix-up"},
		{name: "http endpoint not on loopback", as: func(iss string) map[string]any {
			m := valid(iss)
			m["token_endpoint"] = "http://tokens.example/token"
			return m
		}, path: "/url", says: "neither https nor loopback"},
		{name: "http revocation endpoint not on loopback", as: func(iss string) map[string]any {
			m := valid(iss)
			m["revocation_endpoint"] = "http://tokens.example/revoke"
			return m
		}, auth: connection.Auth{ClientID: "given"}, path: "/url", says: "revocation_endpoint is not https"},
		{name: "no S256", as: func(iss string) map[string]any {
			m := valid(iss)
			m["code_challenge_methods_supported"] = []string{"plain"}
			return m
		}, auth: connection.Auth{ClientID: "given"}, path: "/url", says: "PKCE S256"},
		{name: "no registration endpoint and no client id", as: valid, path: "/auth/clientId", says: "no dynamic client registration"},
		{name: "authorization server at a refused address", as: valid, asAt: "127.0.0.2:0",
			policy: egress.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}),
			path:   "/url", says: "egress to 127.0.0.2 refused: loopback address not allowed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			issuer := connectiontest.AuthServer(t, c.asAt, c.as)
			srv := connectiontest.Start(t, nil, append([]connectiontest.Option{connectiontest.WithIssuer(issuer)}, c.opts...)...)
			policy := c.policy
			if policy == nil {
				policy = egress.New(egress.Loopback())
			}
			hc, calls := client(policy)
			st := newStore(t)
			svc := newService(t, st, newKeyring(t), hc, nil)
			auth := c.auth
			auth.Owner = store.OwnerUser
			_, err := svc.Discover(t.Context(), srv.URL, auth)
			fe := wantCode(t, err, connection.CodeInvalidOAuthServer)
			if fe.Kind != fault.Invalid || len(fe.Violations) != 1 || fe.Violations[0].Path != c.path {
				t.Errorf("kind %v, violations %+v, want one at %s", fe.Kind, fe.Violations, c.path)
			}
			if !strings.Contains(fe.Message, c.says) {
				t.Errorf("message %q does not say %q", fe.Message, c.says)
			}
			if n := calls.count("POST /register"); n != 0 {
				t.Errorf("%d registrations", n)
			}
			if cs, err := st.ListConnections(t.Context(), org); err != nil || len(cs) != 0 {
				t.Errorf("stored %d connections (%v)", len(cs), err)
			}
		})
	}
}

func TestDiscoverInvalidInput(t *testing.T) {
	hc, _ := client(egress.New(egress.Loopback()))
	svc := newService(t, newStore(t), newKeyring(t), hc, nil)
	for _, c := range []struct {
		name, url string
		auth      connection.Auth
		path      string
	}{
		{"no owner", "https://mcp.example/mcp", connection.Auth{}, "/auth/owner"},
		{"relative url", "/mcp", connection.Auth{Owner: store.OwnerOrg}, "/url"},
		{"ftp url", "ftp://mcp.example/mcp", connection.Auth{Owner: store.OwnerOrg}, "/url"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := svc.Discover(context.Background(), c.url, c.auth)
			fe := fault.Of(err)
			if fe.Kind != fault.Invalid || len(fe.Violations) != 1 || fe.Violations[0].Path != c.path {
				t.Errorf("%v: violations %+v, want one at %s", err, fe.Violations, c.path)
			}
		})
	}
}

func TestRefused(t *testing.T) {
	answer := func(status int, code string) error {
		return &oauth2.RetrieveError{Response: &http.Response{StatusCode: status, Status: http.StatusText(status)}, ErrorCode: code}
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"invalid_grant", answer(400, "invalid_grant"), true},
		{"invalid_client", answer(401, "invalid_client"), true},
		{"400 without an error code", answer(400, ""), true},
		{"server_error", answer(400, "server_error"), false},
		{"temporarily_unavailable", answer(400, "temporarily_unavailable"), false},
		{"503", answer(503, ""), false},
		{"500 with an error code", answer(500, "invalid_grant"), false},
		{"no answer", errors.New("dial tcp: connection refused"), false},
	} {
		if got := connection.Refused(c.err); got != c.want {
			t.Errorf("%s: refused %v, want %v", c.name, got, c.want)
		}
	}
}
