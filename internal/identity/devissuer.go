package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The paths `xema dev issuer` serves beside JWKSPath: OpenID discovery, and the token endpoint
// minting development tokens.
const (
	DiscoveryPath = "/.well-known/openid-configuration"
	TokenPath     = "/token"
)

// StandaloneHandler serves the development issuer as a process of its own (`xema dev issuer`),
// so a gateway runs the production path against it: `xema serve --issuer URL` discovers the
// JWKS like any issuer's. base is the issuer's URL, which is also its name (iss): the issuer
// must be opened with OpenIssuer(dir, base). POST /token mints a token for the DevClaims in
// the form (DevClaims.Form): anyone who reaches it gets any token, so it listens on loopback
// only (the command refuses any other address).
func (i *Issuer) StandaloneHandler() http.Handler {
	mux := http.NewServeMux()
	discovery, _ := json.Marshal(map[string]any{ // plain strings: cannot fail
		"issuer":                                i.name,
		"jwks_uri":                              i.name + JWKSPath,
		"token_endpoint":                        i.name + TokenPath,
		"id_token_signing_alg_values_supported": []string{"ES256"},
		"subject_types_supported":               []string{"public"},
		"response_types_supported":              []string{"token"},
	})
	mux.HandleFunc("GET "+DiscoveryPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(discovery)
	})
	mux.Handle(JWKSPath, i.JWKSHandler())
	mux.HandleFunc("POST "+TokenPath, func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			tokenError(w, http.StatusBadRequest, "the body must be a form (application/x-www-form-urlencoded): "+err.Error())
			return
		}
		c, err := DevClaimsFromForm(r.PostForm)
		if err == nil {
			err = c.Validate()
		}
		if err != nil {
			tokenError(w, http.StatusBadRequest, err.Error())
			return
		}
		tok, err := i.Mint(c)
		if err != nil {
			tokenError(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(c.TTL.Seconds())})
	})
	return mux
}

// tokenError answers an OAuth-style error body.
func tokenError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_request", "error_description": msg})
}

// Form encodes the claims as the token endpoint's form fields: the flags of `xema dev token`
// without their dashes (group, role and armed repeated).
func (c DevClaims) Form() url.Values {
	f := url.Values{"subject": {c.Subject}, "env": {c.Environment}, "ttl": {c.TTL.String()}}
	for k, v := range map[string]string{"org": c.Org, "org-role": c.OrgRole, "project": c.Project, "session": c.Session, "audience": c.Audience} {
		if v != "" {
			f.Set(k, v)
		}
	}
	for k, v := range map[string][]string{"group": c.Groups, "role": c.Roles, "armed": c.Armed} {
		if v != nil {
			f[k] = v
		}
	}
	return f
}

// DevClaimsFromForm decodes Form's fields; an unknown field or a bad ttl is an error naming
// it, and a missing ttl is an hour. An outbound token is never minted over HTTP.
func DevClaimsFromForm(f url.Values) (DevClaims, error) {
	known := map[string]bool{"subject": true, "env": true, "ttl": true, "org": true, "org-role": true, "project": true,
		"session": true, "audience": true, "group": true, "role": true, "armed": true}
	for k := range f {
		if !known[k] {
			return DevClaims{}, fmt.Errorf("unknown field %q", k)
		}
	}
	c := DevClaims{Subject: f.Get("subject"), Environment: f.Get("env"), Org: f.Get("org"), OrgRole: f.Get("org-role"),
		Project: f.Get("project"), Session: f.Get("session"), Audience: f.Get("audience"),
		Groups: f["group"], Roles: f["role"], Armed: f["armed"], TTL: time.Hour}
	if s := f.Get("ttl"); s != "" {
		ttl, err := time.ParseDuration(s)
		if err != nil {
			return DevClaims{}, fmt.Errorf("ttl %q: want a duration such as 1h", s)
		}
		c.TTL = ttl
	}
	return c, nil
}

// FetchDevToken asks the token endpoint of the development issuer at issuer (`xema dev
// issuer`) for a token asserting c.
func FetchDevToken(ctx context.Context, issuer string, c DevClaims) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(issuer, "/")+TokenPath, strings.NewReader(c.Form().Encode()))
	if err != nil {
		return "", fmt.Errorf("dev token from %s: %w", issuer, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return "", fmt.Errorf("dev token from %s: %w", issuer, err)
	}
	defer resp.Body.Close()
	var body struct {
		AccessToken string `json:"access_token"`
		Description string `json:"error_description"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body); err != nil {
		return "", fmt.Errorf("dev token from %s: status %d: %w", issuer, resp.StatusCode, err)
	}
	switch {
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("dev token from %s: %s", issuer, body.Description)
	case body.AccessToken == "":
		return "", errors.New("dev token from " + issuer + ": the answer holds no access_token")
	}
	return body.AccessToken, nil
}
