package connection

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/store"
)

// ClientName is the name the gateway registers itself under at an authorization server.
const ClientName = "xema-gateway"

// initializeProbe is an MCP initialize request sent without a token: a protected server
// answers 401 with its resource_metadata challenge.
const initializeProbe = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",` +
	`"capabilities":{},"clientInfo":{"name":"` + ClientName + `","version":"1"}}}`

// Discover finds how to connect to the MCP server at serverURL: its protected-resource
// metadata (RFC 9728: named by the 401 challenge of an unauthenticated initialize, else at
// the well-known URL), whose resource must be serverURL; its authorization server's metadata
// (RFC 8414, else OpenID discovery), whose issuer must be the one named (mix-up defence),
// with https (or loopback http) endpoints and PKCE S256; and the gateway's client there: a.ClientID,
// else one registered by RFC 7591. Nothing is stored: the caller stores the Server with the
// registration.
func (s *Service) Discover(ctx context.Context, serverURL string, a Auth) (Server, error) {
	if a.Owner != store.OwnerOrg && a.Owner != store.OwnerUser {
		return Server{}, invalidArg("/auth/owner", "must be org or user")
	}
	u, err := url.Parse(serverURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return Server{}, invalidServer("/url", "must be an absolute http(s) URL")
	}
	d := &discovery{s: s, hc: trackDenials(s.http)}
	return d.run(ctx, serverURL, u, a)
}

// discovery is one Discover: its client records any address the egress policy refused, so
// the failure can say so even where the SDK flattens the error into text.
type discovery struct {
	s  *Service
	hc *http.Client
}

func (d *discovery) run(ctx context.Context, serverURL string, u *url.URL, a Auth) (Server, error) {
	prm, err := d.resourceMetadata(ctx, serverURL, u)
	if err != nil {
		return Server{}, err
	}
	if len(prm.AuthorizationServers) == 0 {
		return Server{}, invalidServer("/url", "the server's protected-resource metadata names no authorization server")
	}
	issuer := prm.AuthorizationServers[0]
	asm, err := d.authServerMetadata(ctx, issuer)
	if err != nil {
		return Server{}, err
	}
	srv := Server{Owner: a.Owner, Resource: prm.Resource, Issuer: issuer,
		AuthorizationEndpoint: asm.AuthorizationEndpoint, TokenEndpoint: asm.TokenEndpoint,
		RevocationEndpoint: asm.RevocationEndpoint, RegistrationEndpoint: asm.RegistrationEndpoint}
	srv.Scopes = slices.Clone(a.Scopes)
	if len(srv.Scopes) == 0 {
		srv.Scopes = slices.Clone(prm.ScopesSupported)
	}
	// Without offline_access many servers issue no refresh token, and every connection would
	// need a person to reconnect once its access token expires.
	if slices.Contains(asm.ScopesSupported, "offline_access") && !slices.Contains(srv.Scopes, "offline_access") {
		srv.Scopes = append(srv.Scopes, "offline_access")
	}
	secret := a.ClientSecret
	switch {
	case a.ClientID != "":
		srv.ClientID = a.ClientID
		srv.TokenAuthMethod = secretMethod(secret, asm.TokenEndpointAuthMethodsSupported)
	case asm.RegistrationEndpoint == "":
		return Server{}, invalidServer("/auth/clientId", "the authorization server %s offers no dynamic client registration "+
			"(its metadata has no registration_endpoint): register a client there and give its clientId", issuer)
	default:
		reg, err := d.register(ctx, asm.RegistrationEndpoint, srv.Scopes)
		if err != nil {
			return Server{}, err
		}
		srv.ClientID, secret, srv.Registered = reg.ClientID, reg.ClientSecret, true
		srv.TokenAuthMethod = reg.TokenEndpointAuthMethod
		if srv.TokenAuthMethod == "" {
			srv.TokenAuthMethod = secretMethod(secret, nil)
		}
	}
	switch srv.TokenAuthMethod {
	case "none", "client_secret_basic", "client_secret_post":
	default:
		return Server{}, invalidServer("/auth/clientId", "the client authenticates by %q at the token endpoint, "+
			"which the gateway does not support (none, client_secret_basic, client_secret_post)", printable(srv.TokenAuthMethod, 40))
	}
	if secret != "" {
		kr, err := d.s.keys()
		if err != nil {
			return Server{}, err
		}
		if srv.ClientSecretSealed, err = kr.Seal([]byte(secret), clientSecretAAD(srv.Resource)); err != nil {
			return Server{}, fault.Wrap(err, fault.Unavailable, CodeTokenUnavailable, "the client secret could not be sealed")
		}
		srv.KeyID = kr.KeyID()
	}
	return srv, nil
}

// secretMethod is how a client with secret authenticates: none without one, else Basic
// when the server takes it (RFC 8414's default) or else POST.
func secretMethod(secret string, supported []string) string {
	switch {
	case secret == "":
		return "none"
	case len(supported) == 0 || slices.Contains(supported, "client_secret_basic"):
		return "client_secret_basic"
	case slices.Contains(supported, "client_secret_post"):
		return "client_secret_post"
	}
	return "client_secret_basic"
}

// resourceMetadata probes the server and fetches its protected-resource metadata.
func (d *discovery) resourceMetadata(ctx context.Context, serverURL string, u *url.URL) (*oauthex.ProtectedResourceMetadata, error) {
	named, err := d.probe(ctx, serverURL)
	if err != nil {
		return nil, err
	}
	candidates := wellKnownResourceURLs(u)
	if named != "" {
		candidates = []string{named}
	}
	var last error
	for _, mu := range candidates {
		prm, err := oauthex.GetProtectedResourceMetadata(ctx, mu, serverURL, d.hc)
		if err == nil {
			return prm, nil
		}
		if de := denied(d.hc); de != nil {
			return nil, invalidServerErr(err, "/url", "the server's protected-resource metadata is at an address the egress policy refuses: %s", de)
		}
		if strings.Contains(err.Error(), "got metadata resource") {
			return nil, invalidServerErr(err, "/url", "the server's protected-resource metadata names another resource "+
				"than this URL (RFC 9728 requires them equal)")
		}
		last = err
	}
	how := "at the well-known URL (RFC 9728)"
	if named != "" {
		how = "at the URL its 401 challenge names"
	}
	return nil, invalidServerErr(last, "/url", "the server publishes no usable protected-resource metadata %s: "+
		"it does not look OAuth-protected as the MCP authorization spec says (%s)", how, printable(errText(last), 200))
}

// probe sends the initialize request without a token and returns the metadata URL a 401
// challenge names ("" when none does).
func (d *discovery) probe(ctx context.Context, serverURL string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, serverURL, strings.NewReader(initializeProbe))
	if err != nil {
		return "", invalidServer("/url", "must be an absolute http(s) URL")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := d.hc.Do(req)
	if err != nil {
		if de := denied(d.hc); de != nil {
			return "", invalidServerErr(err, "/url", "the server's address is refused by the egress policy: %s", de)
		}
		return "", invalidServerErr(err, "/url", "the server could not be reached: %s", printable(errText(errors.Unwrap(err)), 200))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		return "", nil
	}
	challenges, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil {
		return "", nil // a malformed challenge: the well-known URL may still serve
	}
	for _, c := range challenges {
		if c.Scheme == "bearer" && c.Params["resource_metadata"] != "" {
			return c.Params["resource_metadata"], nil
		}
	}
	return "", nil
}

// wellKnownResourceURLs are RFC 9728's metadata URLs for u: with the path inserted, then at
// the root.
func wellKnownResourceURLs(u *url.URL) []string {
	base := url.URL{Scheme: u.Scheme, Host: u.Host}
	var out []string
	if p := strings.Trim(u.Path, "/"); p != "" {
		base.Path = "/.well-known/oauth-protected-resource/" + p
		out = append(out, base.String())
	}
	base.Path = "/.well-known/oauth-protected-resource"
	return append(out, base.String())
}

// authServerMetadataURLs are the metadata URLs of issuer: RFC 8414 then OpenID discovery,
// with the issuer's path inserted or (OpenID) appended. Unlike the SDK's, a trailing slash
// of the issuer (hydra's "http://host/") is no path: its path-inserted URLs would end in "/",
// which servers redirect, and a redirect is never followed.
func authServerMetadataURLs(issuer string) ([]string, error) {
	u, err := url.Parse(issuer)
	if err != nil || u.Host == "" {
		return nil, errors.New("not an absolute URL")
	}
	p := strings.Trim(u.Path, "/")
	base := url.URL{Scheme: u.Scheme, Host: u.Host}
	at := func(path string) string { b := base; b.Path = path; return b.String() }
	if p == "" {
		return []string{at("/.well-known/oauth-authorization-server"), at("/.well-known/openid-configuration")}, nil
	}
	return []string{at("/.well-known/oauth-authorization-server/" + p), at("/.well-known/openid-configuration/" + p),
		at("/" + p + "/.well-known/openid-configuration")}, nil
}

// authServerMetadata fetches and checks issuer's metadata.
func (d *discovery) authServerMetadata(ctx context.Context, issuer string) (*oauthex.AuthServerMeta, error) {
	urls, err := authServerMetadataURLs(issuer)
	if err != nil {
		return nil, invalidServer("/url", "the authorization server named by the server's metadata is %s", err)
	}
	var asm *oauthex.AuthServerMeta
	for _, mu := range urls {
		// The SDK checks the issuer (mix-up defence), that PKCE is advertised, and that the
		// endpoints are https or loopback.
		got, err := oauthex.GetAuthServerMeta(ctx, mu, issuer, d.hc)
		if err != nil {
			return nil, d.asError(err, issuer)
		}
		if got != nil {
			asm = got
			break
		}
	}
	if asm == nil {
		return nil, invalidServer("/url", "the authorization server %s publishes no metadata (RFC 8414 nor OpenID discovery)", issuer)
	}
	if asm.AuthorizationEndpoint == "" || asm.TokenEndpoint == "" {
		return nil, invalidServer("/url", "the authorization server %s's metadata lacks an authorization_endpoint or a token_endpoint", issuer)
	}
	for _, e := range []struct{ name, url string }{{"authorization_endpoint", asm.AuthorizationEndpoint},
		{"token_endpoint", asm.TokenEndpoint}, {"revocation_endpoint", asm.RevocationEndpoint},
		{"registration_endpoint", asm.RegistrationEndpoint}} {
		if msg := httpsOrLoopback(e.url); msg != "" {
			return nil, invalidServer("/url", "the authorization server %s's %s %s", issuer, e.name, msg)
		}
	}
	if !slices.Contains(asm.CodeChallengeMethodsSupported, "S256") {
		return nil, invalidServer("/url", "the authorization server %s does not support PKCE S256 (code_challenge_methods_supported)", issuer)
	}
	return asm, nil
}

// asError says plainly why the SDK refused an authorization server's metadata.
func (d *discovery) asError(err error, issuer string) error {
	text := err.Error()
	switch {
	case denied(d.hc) != nil:
		return invalidServerErr(err, "/url", "the authorization server %s is at an address the egress policy refuses: %s", issuer, denied(d.hc))
	case strings.Contains(text, "does not match issuer"):
		return invalidServerErr(err, "/url", "the authorization server's metadata names another issuer than %s, "+
			"the one the server's metadata names (mix-up defence): refused", issuer)
	case strings.Contains(text, "does not implement PKCE"):
		return invalidServerErr(err, "/url", "the authorization server %s does not advertise PKCE (code_challenge_methods_supported)", issuer)
	case strings.Contains(text, "does not use HTTPS"), strings.Contains(text, "non-public address"):
		return invalidServerErr(err, "/url", "the authorization server %s has an endpoint that is neither https nor loopback http: %s",
			issuer, printable(text, 300))
	}
	return invalidServerErr(err, "/url", "the authorization server %s's metadata could not be read: %s", issuer, printable(text, 300))
}

// httpsOrLoopback is why raw may not receive a credential ("" when it may): https, or http
// to a loopback host.
func httpsOrLoopback(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "":
		return "is not an absolute URL"
	case u.Scheme == "https":
		return ""
	case u.Scheme == "http" && egress.IsLoopbackHost(u.Hostname()):
		return ""
	}
	return "is not https (plain http only on a loopback host)"
}

// registration is what the gateway reads of an RFC 7591 registration answer: nothing else
// of it is kept, or shown (it may hold a registration access token).
type registration struct {
	ClientID                string `json:"client_id"`
	ClientSecret            string `json:"client_secret"`
	TokenEndpointAuthMethod string `json:"token_endpoint_auth_method"`
}

// register registers the gateway as a public client (RFC 7591). The SDK's RegisterClient is
// not used: it cannot read an answer whose jwks is an object (hydra's, as RFC 7591 has it),
// and its errors quote the whole answer, registration access token included.
func (d *discovery) register(ctx context.Context, endpoint string, scopes []string) (registration, error) {
	body, err := json.Marshal(map[string]any{
		"redirect_uris":              []string{d.s.redirectURI},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": "none",
		"client_name":                ClientName,
		"scope":                      strings.Join(scopes, " "),
	})
	if err != nil {
		return registration{}, fmt.Errorf("registration request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return registration{}, invalidServer("/auth/clientId", "the registration_endpoint is not a URL")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := d.hc.Do(req)
	if err != nil {
		if de := denied(d.hc); de != nil {
			return registration{}, invalidServerErr(err, "/auth/clientId", "the registration endpoint is at an address the egress policy refuses: %s", de)
		}
		return registration{}, invalidServerErr(err, "/auth/clientId", "the registration endpoint could not be reached")
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		var e struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return registration{}, invalidServer("/auth/clientId", "the authorization server refused to register the gateway: %s (%s); "+
				"register a client there and give its clientId", printable(e.Error, 64), printable(e.Description, 200))
		}
		return registration{}, invalidServer("/auth/clientId", "the registration endpoint answered %s; register a client there and give its clientId", resp.Status)
	}
	var reg registration
	if err := json.Unmarshal(b, &reg); err != nil || reg.ClientID == "" {
		return registration{}, invalidServer("/auth/clientId", "the registration endpoint's answer has no client_id")
	}
	return reg, nil
}

// invalidServerErr is invalidServer keeping err for the log.
func invalidServerErr(err error, path, format string, args ...any) error {
	e := invalidServer(path, format, args...).(*fault.Error)
	e.Err = err
	return e
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// denyTracker remembers the first address the egress policy refused.
type denyTracker struct {
	rt   http.RoundTripper
	mu   sync.Mutex
	deny *egress.DenyError
}

func (t *denyTracker) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(r)
	if de, ok := egress.Denied(err); ok {
		t.mu.Lock()
		if t.deny == nil {
			t.deny = de
		}
		t.mu.Unlock()
	}
	return resp, err
}

// trackDenials is a copy of hc recording egress refusals.
func trackDenials(hc *http.Client) *http.Client {
	c := *hc
	rt := c.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	c.Transport = &denyTracker{rt: rt}
	return &c
}

// denied is the refusal a trackDenials client recorded, or nil.
func denied(hc *http.Client) *egress.DenyError {
	t, ok := hc.Transport.(*denyTracker)
	if !ok {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deny
}
