package hydratest

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// Person is who the test login and consent app signs in: hydra's subject (the token's sub)
// and the claims the consent puts in the access token (hydra writes them under "ext" in a
// JWT access token) and in the ID token.
type Person struct {
	Subject     string
	AccessToken map[string]any
	IDToken     map[string]any
	// Refuse has the login app reject this person's login with access_denied, as a person
	// declining would: hydra then redirects to the client with ?error=access_denied.
	Refuse bool
}

// StartWithLogin runs hydra for the authorization code flow, with a login and consent app
// (an httptest server) that accepts every request without asking anything: the login as
// persons[login_hint] (persons[""] without a hint), the consent with every requested scope
// and audience and the person's session claims. extraEnv adds hydra configuration.
func StartWithLogin(t testing.TB, persons map[string]Person, extraEnv ...string) *Server {
	t.Helper()
	var adminURL string // set once hydra runs; the app gets no request before that
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		ch := r.URL.Query().Get("login_challenge")
		var req struct {
			OIDC struct {
				LoginHint string `json:"login_hint"`
			} `json:"oidc_context"`
		}
		if err := adminCall(http.MethodGet, adminURL+"/admin/oauth2/auth/requests/login?login_challenge="+url.QueryEscape(ch), nil, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		p, ok := persons[req.OIDC.LoginHint]
		if !ok {
			http.Error(w, "no such person: "+req.OIDC.LoginHint, http.StatusForbidden)
			return
		}
		var ans struct {
			RedirectTo string `json:"redirect_to"`
		}
		if p.Refuse {
			if err := adminCall(http.MethodPut, adminURL+"/admin/oauth2/auth/requests/login/reject?login_challenge="+url.QueryEscape(ch),
				map[string]any{"error": "access_denied", "error_description": "the person declined"}, &ans); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			http.Redirect(w, r, ans.RedirectTo, http.StatusFound)
			return
		}
		if err := adminCall(http.MethodPut, adminURL+"/admin/oauth2/auth/requests/login/accept?login_challenge="+url.QueryEscape(ch),
			map[string]any{"subject": p.Subject, "remember": false}, &ans); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		http.Redirect(w, r, ans.RedirectTo, http.StatusFound)
	})
	mux.HandleFunc("GET /consent", func(w http.ResponseWriter, r *http.Request) {
		ch := r.URL.Query().Get("consent_challenge")
		var req struct {
			Subject  string   `json:"subject"`
			Scope    []string `json:"requested_scope"`
			Audience []string `json:"requested_access_token_audience"`
		}
		if err := adminCall(http.MethodGet, adminURL+"/admin/oauth2/auth/requests/consent?consent_challenge="+url.QueryEscape(ch), nil, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		var p *Person
		for _, q := range persons {
			if q.Subject == req.Subject {
				p = &q
				break
			}
		}
		if p == nil {
			http.Error(w, "no such person: "+req.Subject, http.StatusForbidden)
			return
		}
		var ans struct {
			RedirectTo string `json:"redirect_to"`
		}
		if err := adminCall(http.MethodPut, adminURL+"/admin/oauth2/auth/requests/consent/accept?consent_challenge="+url.QueryEscape(ch),
			map[string]any{"grant_scope": req.Scope, "grant_access_token_audience": req.Audience, "remember": false,
				"session": map[string]any{"access_token": p.AccessToken, "id_token": p.IDToken}}, &ans); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		http.Redirect(w, r, ans.RedirectTo, http.StatusFound)
	})
	app := httptest.NewServer(mux)
	t.Cleanup(app.Close)
	env := append([]string{"URLS_LOGIN=" + app.URL + "/login", "URLS_CONSENT=" + app.URL + "/consent"}, extraEnv...)
	s := Start(t, env...)
	adminURL = s.AdminURL
	s.LoginURL = app.URL
	return s
}

// adminCall sends body (JSON, if any) to hydra's admin API and decodes the answer into out.
func adminCall(method, u string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("hydra %s %s: %s: %s", method, u, resp.Status, b)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

// CreatePublicClient registers a public authorization-code client (no secret, PKCE) whose
// only redirect URI is redirectURI, allowed the scopes openid and offline and audience.
func (s *Server) CreatePublicClient(t testing.TB, redirectURI string, audience ...string) Client {
	t.Helper()
	var c struct {
		ID string `json:"client_id"`
	}
	err := adminCall(http.MethodPost, s.AdminURL+"/admin/clients", map[string]any{
		"grant_types":                []string{"authorization_code"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": "none",
		"redirect_uris":              []string{redirectURI},
		"scope":                      "openid offline",
		"audience":                   audience,
		"access_token_strategy":      "jwt",
	}, &c)
	if err != nil || c.ID == "" {
		t.Fatalf("hydra: create public client: %v (id %q)", err, c.ID)
	}
	return Client{ID: c.ID}
}

// AuthorizationCodeToken signs loginHint's person in through the authorization code flow
// with PKCE, as a browser would (following hydra's and the login app's redirects with a
// cookie jar), and returns the access token.
func (s *Server) AuthorizationCodeToken(t testing.TB, c Client, redirectURI, audience, loginHint string) string {
	t.Helper()
	verifier := randomString(32)
	sum := sha256.Sum256([]byte(verifier))
	state := randomString(16)
	q := url.Values{"response_type": {"code"}, "client_id": {c.ID}, "redirect_uri": {redirectURI}, "scope": {"openid"},
		"state": {state}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"}}
	if audience != "" {
		q.Set("audience", audience)
	}
	if loginHint != "" {
		q.Set("login_hint", loginHint)
	}
	jar, _ := cookiejar.New(nil)
	var landed *url.URL
	// Fresh connections only: net/http retries a GET that failed on a reused keep-alive
	// connection, and hydra refuses a login or consent verifier presented twice ("already
	// used"): the flake seen once under load.
	hc := &http.Client{Jar: jar, Transport: &http.Transport{DisableKeepAlives: true}, CheckRedirect: func(r *http.Request, via []*http.Request) error {
		if strings.HasPrefix(r.URL.String(), redirectURI) {
			landed = r.URL
			return http.ErrUseLastResponse
		}
		if len(via) > 20 {
			return errors.New("too many redirects")
		}
		return nil
	}}
	resp, err := hc.Get(s.PublicURL + "/oauth2/auth?" + q.Encode())
	if err != nil {
		t.Fatalf("hydra: authorize: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if landed == nil {
		t.Fatalf("hydra: authorize did not reach %s: %s %s", redirectURI, resp.Status, b)
	}
	if landed.Query().Get("state") != state || landed.Query().Get("code") == "" {
		t.Fatalf("hydra: authorize answered %s", landed.Query())
	}
	resp, err = http.PostForm(s.TokenURL(), url.Values{"grant_type": {"authorization_code"}, "client_id": {c.ID},
		"code": {landed.Query().Get("code")}, "code_verifier": {verifier}, "redirect_uri": {redirectURI}})
	if err != nil {
		t.Fatalf("hydra: token: %v", err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	b, _ = io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &tok); err != nil || resp.StatusCode != http.StatusOK || tok.AccessToken == "" {
		t.Fatalf("hydra: token: %s: %s", resp.Status, b)
	}
	return tok.AccessToken
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// SetRedirectURI replaces client c's redirect URIs with redirectURI (for a client registered
// before the address it redirects to was known).
func (s *Server) SetRedirectURI(t testing.TB, c Client, redirectURI string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPatch, s.AdminURL+"/admin/clients/"+url.PathEscape(c.ID),
		strings.NewReader(`[{"op":"replace","path":"/redirect_uris","value":[`+strconvQuote(redirectURI)+`]}]`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("hydra: patch client: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("hydra: patch client: %s: %s", resp.Status, b)
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
