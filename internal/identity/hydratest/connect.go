package hydratest

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
)

// DynamicRegistration is the configuration (extraEnv for Start or StartWithLogin) turning on
// RFC 7591 dynamic client registration at PublicURL + "/oauth2/register", named as
// registration_endpoint in hydra's discovery document (hydra names it only when told its
// URL). Registered clients get the scopes they ask for among openid, offline and
// offline_access (offline or offline_access yields a refresh token).
func DynamicRegistration() []string {
	return []string{"OIDC_DYNAMIC_CLIENT_REGISTRATION_ENABLED=true",
		"WEBFINGER_OIDC_DISCOVERY_CLIENT_REGISTRATION_URL=" + PublicURLVar + "/oauth2/register"}
}

// RegistrationURL is the dynamic client registration endpoint (with DynamicRegistration).
func (s *Server) RegistrationURL() string { return s.PublicURL + "/oauth2/register" }

// Authorize walks authURL (an authorization request of any client) as a browser would:
// with a cookie jar, through hydra's login and consent as loginHint's person (the login
// app's persons), following redirects until one leaves hydra and the login app, and returns
// where that one points (the client's redirect URI with code and state, or error), without
// following it: the test calls the client's callback itself.
func (s *Server) Authorize(t testing.TB, authURL, loginHint string) *url.URL {
	t.Helper()
	u, err := url.Parse(authURL)
	if err != nil {
		t.Fatalf("hydra: authorize: %v", err)
	}
	if loginHint != "" {
		q := u.Query()
		q.Set("login_hint", loginHint)
		u.RawQuery = q.Encode()
	}
	inside := func(v *url.URL) bool {
		return strings.HasPrefix(v.String(), s.PublicURL+"/") || (s.LoginURL != "" && strings.HasPrefix(v.String(), s.LoginURL+"/"))
	}
	jar, _ := cookiejar.New(nil)
	var landed *url.URL
	// Fresh connections only, as AuthorizationCodeToken (hydra refuses a verifier presented
	// twice, which a retried GET on a reused connection would do).
	hc := &http.Client{Jar: jar, Transport: &http.Transport{DisableKeepAlives: true}, CheckRedirect: func(r *http.Request, via []*http.Request) error {
		if !inside(r.URL) {
			landed = r.URL
			return http.ErrUseLastResponse
		}
		if len(via) > 20 {
			return errors.New("too many redirects")
		}
		return nil
	}}
	resp, err := hc.Get(u.String())
	if err != nil {
		t.Fatalf("hydra: authorize: %v", err)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if landed == nil {
		t.Fatalf("hydra: authorize did not leave hydra: %s %s", resp.Status, b)
	}
	return landed
}

// RevokeConsent revokes every consent subject gave, and with them every token issued to
// them: a refresh then fails as a refresh the authorization server refuses.
func (s *Server) RevokeConsent(t testing.TB, subject string) {
	t.Helper()
	q := url.Values{"subject": {subject}, "all": {"true"}}
	if err := adminCall(http.MethodDelete, s.AdminURL+"/admin/oauth2/auth/sessions/consent?"+q.Encode(), nil, nil); err != nil {
		t.Fatalf("hydra: revoke consent: %v", err)
	}
}

// Active reports whether hydra's introspection finds token (an access or refresh token)
// active.
func (s *Server) Active(t testing.TB, token string) bool {
	t.Helper()
	resp, err := http.PostForm(s.AdminURL+"/admin/oauth2/introspect", url.Values{"token": {token}})
	if err != nil {
		t.Fatalf("hydra: introspect: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("hydra: introspect: %s: %s", resp.Status, b)
	}
	var ans struct {
		Active bool `json:"active"`
	}
	if err := json.Unmarshal(b, &ans); err != nil {
		t.Fatalf("hydra: introspect: %v", err)
	}
	return ans.Active
}
