package console

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Paths of the production sign-in.
const (
	ConfigPath   = "/console/config.json"
	TokenPath    = "/console/token"
	CallbackPath = "/console/callback"
)

// OIDC is the production sign-in: the authorization code flow with PKCE against the
// gateway's --issuer, as a public client (no secret). The browser makes the verifier and the
// state and goes to AuthorizationEndpoint; on /console/callback it posts the code and its
// verifier to POST /console/token, which forwards exactly that exchange to TokenEndpoint for
// ClientID and answers only the access token. So the console's CSP keeps connect-src 'self'
// (the browser talks to the issuer only by navigation) and the issuer needs no CORS for the
// gateway's origin.
type OIDC struct {
	Issuer                string
	ClientID              string
	Audience              string // asked for with the audience parameter (hydra, Auth0); "" asks none
	Scope                 string // space-separated, openid among them
	AuthorizationEndpoint string
	TokenEndpoint         string
	// PublicURL is the gateway's external base URL; "" derives the redirect URI from the
	// request's Host.
	PublicURL string
	// Client sends the exchange (default: a client with a 15 s timeout).
	Client *http.Client
}

func (o *OIDC) public() any {
	if o == nil {
		return nil
	}
	return map[string]string{"issuer": o.Issuer, "clientId": o.ClientID, "audience": o.Audience, "scope": o.Scope,
		"authorizationEndpoint": o.AuthorizationEndpoint, "redirectUri": o.redirectURI(nil)}
}

// redirectURI is <public URL>/console/callback; "" when it comes from each request (r nil).
func (o *OIDC) redirectURI(r *http.Request) string {
	if o.PublicURL != "" {
		return strings.TrimSuffix(o.PublicURL, "/") + CallbackPath
	}
	if r == nil {
		return ""
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + CallbackPath
}

// exchangeRequest is what the console's script posts.
type exchangeRequest struct {
	Code         string `json:"code"`
	CodeVerifier string `json:"codeVerifier"`
	RedirectURI  string `json:"redirectUri"`
}

func exchangeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": msg})
}

// exchange forwards one authorization-code exchange to the issuer: only this client, only
// the grant authorization_code, only the console's redirect URI. The code, the verifier and
// the tokens are never logged.
func (o *OIDC) exchange(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		exchangeError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "POST the code and its verifier")
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		exchangeError(w, http.StatusUnsupportedMediaType, "UNSUPPORTED_MEDIA_TYPE", "want application/json")
		return
	}
	want := o.redirectURI(r)
	// A page of another origin cannot read the answer (no CORS), and may not even ask.
	if origin := r.Header.Get("Origin"); origin != "" && !strings.HasPrefix(want, origin+"/") {
		exchangeError(w, http.StatusForbidden, "FORBIDDEN_ORIGIN", "the exchange is for the console's own page")
		return
	}
	var req exchangeRequest // one JSON object, nothing after it
	dec := json.NewDecoder(io.LimitReader(r.Body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || dec.Decode(&struct{}{}) != io.EOF || req.Code == "" || !validVerifier(req.CodeVerifier) {
		exchangeError(w, http.StatusBadRequest, "BAD_REQUEST", "want {code, codeVerifier (43-128 characters of RFC 7636), redirectUri}")
		return
	}
	if req.RedirectURI != want {
		exchangeError(w, http.StatusBadRequest, "BAD_REQUEST", "redirectUri is not this console's callback "+want)
		return
	}
	form := url.Values{"grant_type": {"authorization_code"}, "client_id": {o.ClientID}, "code": {req.Code},
		"code_verifier": {req.CodeVerifier}, "redirect_uri": {want}}
	hreq, err := http.NewRequestWithContext(r.Context(), http.MethodPost, o.TokenEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		exchangeError(w, http.StatusBadGateway, "ISSUER_UNAVAILABLE", "the issuer's token endpoint is not a URL")
		return
	}
	hreq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	hreq.Header.Set("Accept", "application/json")
	hc := o.Client
	if hc == nil {
		hc = &http.Client{Timeout: 15 * time.Second}
	}
	resp, err := hc.Do(hreq)
	if err != nil {
		slog.Warn("console sign-in: token endpoint unreachable", "issuer", o.Issuer) // err may name the URL only
		exchangeError(w, http.StatusBadGateway, "ISSUER_UNAVAILABLE", "the issuer's token endpoint did not answer")
		return
	}
	defer resp.Body.Close()
	var ans struct {
		AccessToken      string `json:"access_token"`
		TokenType        string `json:"token_type"`
		ExpiresIn        int64  `json:"expires_in"`
		Error            string `json:"error"`
		ErrorDescription string `json:"error_description"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ans); err != nil {
		exchangeError(w, http.StatusBadGateway, "ISSUER_UNAVAILABLE", "the issuer's token endpoint answered "+resp.Status+" without JSON")
		return
	}
	if resp.StatusCode != http.StatusOK || ans.AccessToken == "" {
		msg := "the issuer refused the code"
		if ans.Error != "" {
			msg += ": " + ans.Error
			if ans.ErrorDescription != "" {
				msg += " (" + ans.ErrorDescription + ")"
			}
		}
		exchangeError(w, http.StatusBadRequest, "SIGN_IN_REFUSED", msg)
		return
	}
	if !strings.EqualFold(ans.TokenType, "bearer") {
		exchangeError(w, http.StatusBadGateway, "SIGN_IN_REFUSED", "the issuer answered a "+ans.TokenType+" token, not a bearer token")
		return
	}
	// Only the access token: the ID token and any refresh token stay out of the browser.
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"accessToken": ans.AccessToken, "expiresIn": ans.ExpiresIn})
}

// validVerifier: RFC 7636 section 4.1, 43 to 128 unreserved characters.
func validVerifier(v string) bool {
	if len(v) < 43 || len(v) > 128 {
		return false
	}
	for _, c := range v {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.ContainsRune("-._~", c)) {
			return false
		}
	}
	return true
}
