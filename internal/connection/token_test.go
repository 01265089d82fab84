package connection_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/store"
)

// tokenEndpoint is an authorization server's token endpoint that refreshes any refresh
// token into access-<n> (valid an hour, the refresh token rotated), counting the refreshes.
type tokenEndpoint struct {
	URL       string
	refreshes atomic.Int64
}

func newTokenEndpoint(t *testing.T) *tokenEndpoint {
	te := &tokenEndpoint{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.ParseForm() != nil || r.PostForm.Get("grant_type") != "refresh_token" {
			http.Error(w, `{"error":"invalid_request"}`, http.StatusBadRequest)
			return
		}
		n := te.refreshes.Add(1)
		time.Sleep(20 * time.Millisecond) // long enough for every concurrent caller to be waiting on it
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": fmt.Sprint("access-", n), "token_type": "Bearer",
			"expires_in": 3600, "refresh_token": fmt.Sprint("refresh-", n)})
	}))
	t.Cleanup(ts.Close)
	te.URL = ts.URL
	return te
}

// TestRefreshOncePerTokenLifetime: calls with a token far from expiry never refresh it;
// concurrent calls once it is about to expire refresh it exactly once and all get the new
// token, which the calls after use without refreshing again. The carried read of a call's
// decision (TokenFor) follows the same rule.
func TestRefreshOncePerTokenLifetime(t *testing.T) {
	ctx := t.Context()
	st := newStore(t)
	kr := newKeyring(t)
	te := newTokenEndpoint(t)
	saveServer(t, st, "tools", connection.Server{Owner: store.OwnerOrg, Resource: "https://mcp.example/mcp", Issuer: te.URL,
		AuthorizationEndpoint: te.URL + "/authorize", TokenEndpoint: te.URL + "/token", ClientID: "xema", TokenAuthMethod: "none"})
	clk := &clock{}
	putConnection(t, st, kr, "tools", "access-0", "refresh-0", clk.now().Add(time.Hour))
	hc, _ := client(egress.New(egress.Loopback()))
	svc := newService(t, st, kr, hc, clk.now)
	orgOwner := connection.Owner{Kind: store.OwnerOrg}

	token := func(carried bool) string {
		t.Helper()
		var read *connection.Read
		if carried {
			var err error
			if read, err = svc.Look(ctx, org, "tools", orgOwner); err != nil || read.Status != connection.StatusConnected {
				t.Fatalf("look: %+v, %v", read, err)
			}
		}
		tok, _, err := svc.TokenFor(ctx, org, "tools", orgOwner, read)
		if err != nil {
			t.Fatal(err)
		}
		return tok.Reveal()
	}
	for i := range 50 {
		if got := token(i%2 == 0); got != "access-0" {
			t.Fatalf("call %d got %q, want the token held", i, got)
		}
	}
	if n := te.refreshes.Load(); n != 0 {
		t.Fatalf("%d refreshes for 50 calls with a token an hour from expiry, want 0", n)
	}

	clk.advance(time.Hour - 30*time.Second) // within the 60s skew
	got := make([]string, 16)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i] = token(i%2 == 0) })
	}
	wg.Wait()
	if n := te.refreshes.Load(); n != 1 {
		t.Fatalf("%d refreshes for 16 concurrent calls at expiry, want 1", n)
	}
	for i, tok := range got {
		if tok != "access-1" {
			t.Errorf("concurrent call %d got %q, want the refreshed access-1", i, tok)
		}
	}
	for i := range 50 {
		if got := token(i%2 == 0); got != "access-1" {
			t.Fatalf("call %d after the refresh got %q", i, got)
		}
	}
	if n := te.refreshes.Load(); n != 1 {
		t.Fatalf("%d refreshes after 50 more calls within the new token's lifetime, want 1", n)
	}
	c, err := st.GetConnection(ctx, org, "tools", store.OwnerOrg, "")
	if err != nil || c.Version != 2 {
		t.Fatalf("stored connection at version %d (%v), want 2: one refresh", c.Version, err)
	}
}

// TestTokenForTakesOnlyItsOwnRead: a carried read is used only for the connection it is of,
// and only while connected with its token fresh; otherwise the store decides.
func TestTokenForTakesOnlyItsOwnRead(t *testing.T) {
	ctx := t.Context()
	st := newStore(t)
	kr := newKeyring(t)
	te := newTokenEndpoint(t)
	for _, p := range []string{"tools", "other"} {
		saveServer(t, st, p, connection.Server{Owner: store.OwnerOrg, Resource: "https://" + p + ".example/mcp", Issuer: te.URL,
			AuthorizationEndpoint: te.URL + "/authorize", TokenEndpoint: te.URL + "/token", ClientID: "xema", TokenAuthMethod: "none"})
	}
	clk := &clock{}
	putConnection(t, st, kr, "tools", "tools-access", "tools-refresh", clk.now().Add(time.Hour))
	putConnection(t, st, kr, "other", "other-access", "", time.Time{})
	hc, _ := client(egress.New(egress.Loopback()))
	svc := newService(t, st, kr, hc, clk.now)
	orgOwner := connection.Owner{Kind: store.OwnerOrg}
	read, err := svc.Look(ctx, org, "tools", orgOwner)
	if err != nil {
		t.Fatal(err)
	}

	// Another provider's read, or another owner's, is not taken.
	if tok, _, err := svc.TokenFor(ctx, org, "other", orgOwner, read); err != nil || tok.Reveal() != "other-access" {
		t.Errorf("another provider's read: %v", err)
	}
	_, _, err = svc.TokenFor(ctx, org, "tools", user("alice"), read)
	_ = wantCode(t, err, connection.CodeRequired)
	_, _, err = svc.TokenFor(ctx, "globex", "tools", orgOwner, read)
	_ = wantCode(t, err, connection.CodeRequired)

	// Disconnected after the read: the call decided on the read runs on it; a call with no
	// read (or a later decision's) finds it gone.
	if _, err := st.DeleteConnection(ctx, org, "con_tools"); err != nil {
		t.Fatal(err)
	}
	if tok, _, err := svc.TokenFor(ctx, org, "tools", orgOwner, read); err != nil || tok.Reveal() != "tools-access" {
		t.Errorf("the decided call's read: %v", err)
	}
	_, _, err = svc.TokenFor(ctx, org, "tools", orgOwner, nil)
	_ = wantCode(t, err, connection.CodeRequired)
	again, err := svc.Look(ctx, org, "tools", orgOwner)
	if err != nil || again.Status != connection.StatusMissing {
		t.Fatalf("a later decision's read: %+v, %v", again, err)
	}
	_, _, err = svc.TokenFor(ctx, org, "tools", orgOwner, again)
	_ = wantCode(t, err, connection.CodeRequired)

	// A read whose token is about to expire is not taken: the store's connection is refreshed.
	putConnection(t, st, kr, "tools", "tools-access", "tools-refresh", clk.now().Add(time.Hour))
	if read, err = svc.Look(ctx, org, "tools", orgOwner); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Hour - 30*time.Second)
	if tok, _, err := svc.TokenFor(ctx, org, "tools", orgOwner, read); err != nil || tok.Reveal() != "access-1" {
		t.Errorf("a read about to expire: %v (refreshes %d)", err, te.refreshes.Load())
	}
}

// TestRefreshAnswers: a refresh answer is taken as its wire format says (GitHub's
// form-encoded expires_in too), one the gateway cannot use is refused with a typed error, and
// a failed one never quotes the answer, which may echo the refresh token or the secret.
func TestRefreshAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body string
		status                  int
		code                    string        // "" when the refresh succeeds
		life                    time.Duration // the stored token's lifetime when it does
	}{
		{"json", "application/json", `{"access_token":"a1","token_type":"bearer","expires_in":3600}`, 200, "", time.Hour},
		{"form-encoded", "application/x-www-form-urlencoded", "access_token=a1&token_type=bearer&expires_in=28800", 200, "", 8 * time.Hour},
		{"a lifetime past a year", "application/json", `{"access_token":"a1","token_type":"bearer","expires_in":99999999999}`, 200, "", 366 * 24 * time.Hour},
		{"not a bearer token", "application/json", `{"access_token":"a1","token_type":"mac","expires_in":3600}`, 200, connection.CodeAuthorizationFailed, 0},
		{"a negative lifetime", "application/json", `{"access_token":"a1","token_type":"bearer","expires_in":-5}`, 200, connection.CodeAuthorizationFailed, 0},
		{"a 500 echoing what was sent", "application/json", `{"error":"server_error","error_description":"refresh_token=refresh-0&client_secret=s3cret"}`, 500, connection.CodeTokenUnavailable, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(ts.Close)
			st, kr, clk := newStore(t), newKeyring(t), &clock{}
			saveServer(t, st, "tools", connection.Server{Owner: store.OwnerOrg, Resource: "https://mcp.example/mcp", Issuer: ts.URL,
				AuthorizationEndpoint: ts.URL + "/authorize", TokenEndpoint: ts.URL + "/token", ClientID: "xema", TokenAuthMethod: "none"})
			putConnection(t, st, kr, "tools", "access-0", "refresh-0", clk.now().Add(10*time.Second)) // within the skew: refreshes
			hc, _ := client(egress.New(egress.Loopback()))
			svc := newService(t, st, kr, hc, clk.now)
			tok, _, err := svc.Token(ctx, org, "tools", connection.Owner{Kind: store.OwnerOrg})
			if tc.code != "" {
				fe := wantCode(t, err, tc.code)
				for _, s := range []string{"refresh-0", "s3cret", tc.body} {
					if strings.Contains(fe.Error(), s) || (fe.Err != nil && strings.Contains(fe.Err.Error(), s)) {
						t.Fatalf("the error quotes %q: %v / %v", s, fe, fe.Err)
					}
				}
				return
			}
			if err != nil || tok.Reveal() != "a1" {
				t.Fatalf("refresh: %q, %v", tok.Reveal(), err)
			}
			c, err := st.GetConnection(ctx, org, "tools", store.OwnerOrg, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := c.ExpiresAt.Sub(clk.now()); got < tc.life-time.Minute || got > tc.life+time.Minute {
				t.Fatalf("stored lifetime %v, want %v", got, tc.life)
			}
		})
	}
}
