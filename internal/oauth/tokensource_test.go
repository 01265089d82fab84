package oauth

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/identity/hydratest"
)

// fakeClock lets a test move past a token's refresh point without sleeping; the tokens
// themselves still come from a real hydra.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// countingTransport counts requests to the token endpoint.
type countingTransport struct{ n atomic.Int64 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

func TestClientCredentialsAgainstHydra(t *testing.T) {
	h := hydratest.Start(t)
	client := h.CreateClient(t, "xema")
	counter := &countingTransport{}
	ts, err := NewTokenSource(Config{
		TokenURL: h.TokenURL(), ClientID: client.ID, ClientSecret: client.Secret,
		Audience: "xema", HTTPClient: &http.Client{Transport: counter, Timeout: 10 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Now()}
	ts.now = clock.Now
	ctx := context.Background()

	first, err := ts.Token(ctx)
	if err != nil {
		t.Fatalf("token from hydra: %v", err)
	}
	if strings.Count(first, ".") != 2 {
		t.Fatalf("hydra was configured for JWT access tokens, got an opaque one")
	}
	again, err := ts.Token(ctx)
	if err != nil || again != first || counter.n.Load() != 1 {
		t.Fatalf("second call must be served from cache: same=%v requests=%d err=%v", again == first, counter.n.Load(), err)
	}

	// hydra's default access token lifetime is 1h: 70% is before the refresh window.
	clock.Advance(42 * time.Minute)
	if tok, _ := ts.Token(ctx); tok != first || counter.n.Load() != 1 {
		t.Fatalf("refreshed before ~80%% of the lifetime (requests=%d)", counter.n.Load())
	}
	// 90% is past it: a new token, one request.
	clock.Advance(12 * time.Minute)
	second, err := ts.Token(ctx)
	if err != nil || second == first || counter.n.Load() != 2 {
		t.Fatalf("want a refreshed token after 90%% of the lifetime: new=%v requests=%d err=%v", second != first, counter.n.Load(), err)
	}

	// Many callers at the refresh point share one request.
	clock.Advance(55 * time.Minute)
	var wg sync.WaitGroup
	got := make([]string, 50)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = ts.Token(ctx)
		}()
	}
	wg.Wait()
	if counter.n.Load() != 3 {
		t.Fatalf("50 concurrent callers at the refresh point made %d requests, want 1", counter.n.Load()-2)
	}
	for _, tok := range got {
		if tok == "" || tok != got[0] || tok == second {
			t.Fatal("concurrent callers did not all get the one refreshed token")
		}
	}
}

func TestWrongSecretIsNoToken(t *testing.T) {
	h := hydratest.Start(t)
	client := h.CreateClient(t, "xema")
	const wrong = "definitely-not-the-secret-4f1b"
	ts, err := NewTokenSource(Config{TokenURL: h.TokenURL(), ClientID: client.ID, ClientSecret: wrong, Audience: "xema"})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ts.Token(context.Background())
	if tok != "" || !errors.Is(err, ErrNoToken) {
		t.Fatalf("want ErrNoToken, got token=%q err=%v", tok, err)
	}
	var nte *NoTokenError
	if !errors.As(err, &nte) || nte.Code != "invalid_client" || nte.Status != http.StatusUnauthorized {
		t.Fatalf("want 401 invalid_client, got %#v", err)
	}
	if strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), client.Secret) {
		t.Fatal("error text leaks a secret")
	}
	// Failing again does not turn into a cached or fallback token.
	if _, err := ts.Token(context.Background()); !errors.Is(err, ErrNoToken) {
		t.Fatalf("second attempt: %v", err)
	}
}

func TestUnreachableEndpointIsNoToken(t *testing.T) {
	ts, err := NewTokenSource(Config{TokenURL: "http://127.0.0.1:1/oauth2/token", ClientID: "c", ClientSecret: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Token(context.Background()); !errors.Is(err, ErrNoToken) {
		t.Fatalf("want ErrNoToken, got %v", err)
	}
}

func TestNewTokenSourceRejects(t *testing.T) {
	for name, cfg := range map[string]Config{
		"plain http to a remote host": {TokenURL: "http://idp.example.com/token", ClientID: "c", ClientSecret: "s"},
		"relative URL":                {TokenURL: "/token", ClientID: "c", ClientSecret: "s"},
		"no secret":                   {TokenURL: "https://idp.example.com/token", ClientID: "c"},
		"no client id":                {TokenURL: "https://idp.example.com/token", ClientSecret: "s"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewTokenSource(cfg); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
