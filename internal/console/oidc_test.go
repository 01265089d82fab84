package console

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestConfigWithoutIssuer(t *testing.T) {
	w := get(t, ConfigPath)
	if w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != `{"oidc":null}` {
		t.Fatalf("config: %d %s", w.Code, w.Body)
	}
	r := httptest.NewRequest(http.MethodPost, TokenPath, strings.NewReader(`{}`))
	w = httptest.NewRecorder()
	Handler().ServeHTTP(w, r)
	if w.Code != http.StatusNotFound {
		t.Fatalf("token exchange without an issuer: %d", w.Code)
	}
}

// TestTokenExchange: POST /console/token forwards exactly one authorization-code exchange for
// the configured client and redirect URI, and answers the access token only.
func TestTokenExchange(t *testing.T) {
	var got url.Values
	issuer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		got = r.PostForm
		w.Header().Set("Content-Type", "application/json")
		if r.PostForm.Get("code") == "bad" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_grant","error_description":"code used"}`))
			return
		}
		_, _ = w.Write([]byte(`{"access_token":"AT","token_type":"bearer","expires_in":300,"id_token":"IDT","refresh_token":"RT"}`))
	}))
	defer issuer.Close()
	o := &OIDC{Issuer: issuer.URL + "/", ClientID: "console", Scope: "openid", AuthorizationEndpoint: issuer.URL + "/oauth2/auth",
		TokenEndpoint: issuer.URL + "/oauth2/token", PublicURL: "https://xema.example.com"}
	h := New(o)
	verifier := strings.Repeat("v", 43)
	post := func(body, origin string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, TokenPath, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	body := func(code, v, redirect string) string {
		b, _ := json.Marshal(map[string]string{"code": code, "codeVerifier": v, "redirectUri": redirect})
		return string(b)
	}
	w := post(body("C", verifier, "https://xema.example.com/console/callback"), "https://xema.example.com")
	if w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != `{"accessToken":"AT","expiresIn":300}` || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("exchange: %d %s %v", w.Code, w.Body, w.Header())
	}
	want := url.Values{"grant_type": {"authorization_code"}, "client_id": {"console"}, "code": {"C"}, "code_verifier": {verifier},
		"redirect_uri": {"https://xema.example.com/console/callback"}}
	if got.Encode() != want.Encode() {
		t.Fatalf("forwarded %v, want %v", got, want)
	}
	for name, c := range map[string]struct {
		body, origin string
		status       int
	}{
		"refused code":   {body("bad", verifier, "https://xema.example.com/console/callback"), "", http.StatusBadRequest},
		"other redirect": {body("C", verifier, "https://evil.example/console/callback"), "", http.StatusBadRequest},
		"short verifier": {body("C", "short", "https://xema.example.com/console/callback"), "", http.StatusBadRequest},
		"no code":        {body("", verifier, "https://xema.example.com/console/callback"), "", http.StatusBadRequest},
		"unknown field":  {`{"code":"C","codeVerifier":"` + verifier + `","redirectUri":"https://xema.example.com/console/callback","client_id":"x"}`, "", http.StatusBadRequest},
		"foreign origin": {body("C", verifier, "https://xema.example.com/console/callback"), "https://evil.example", http.StatusForbidden},
		"null origin":    {body("C", verifier, "https://xema.example.com/console/callback"), "null", http.StatusForbidden},
		"origin prefix":  {body("C", verifier, "https://xema.example.com/console/callback"), "https://xema.example.co", http.StatusForbidden},
		"second value":   {body("C", verifier, "https://xema.example.com/console/callback") + body("D", verifier, "https://xema.example.com/console/callback"), "", http.StatusBadRequest},
		"huge body":      {`{"code":"` + strings.Repeat("C", 1<<20) + `","codeVerifier":"` + verifier + `","redirectUri":"https://xema.example.com/console/callback"}`, "", http.StatusBadRequest},
	} {
		got = nil
		if w := post(c.body, c.origin); w.Code != c.status || strings.Contains(w.Body.String(), "AT") {
			t.Errorf("%s: %d %s", name, w.Code, w.Body)
		}
		if got != nil && name != "refused code" {
			t.Errorf("%s: forwarded to the issuer: %v", name, got)
		}
	}
	if w := post(body("bad", verifier, "https://xema.example.com/console/callback"), ""); !strings.Contains(w.Body.String(), "invalid_grant") {
		t.Errorf("the issuer's refusal is not passed on: %s", w.Body)
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, TokenPath, nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET %s: %d", TokenPath, w.Code)
	}
	// The config names what the browser needs, nothing secret.
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, ConfigPath, nil))
	var cfg struct{ OIDC map[string]string }
	if err := json.Unmarshal(w.Body.Bytes(), &cfg); err != nil || cfg.OIDC["clientId"] != "console" ||
		cfg.OIDC["authorizationEndpoint"] != issuer.URL+"/oauth2/auth" || cfg.OIDC["redirectUri"] != "https://xema.example.com/console/callback" {
		t.Fatalf("config: %s", w.Body)
	}
	if strings.Contains(w.Body.String(), "token_endpoint") || strings.Contains(w.Body.String(), "/oauth2/token") {
		t.Errorf("config exposes the token endpoint: %s", w.Body)
	}
}
