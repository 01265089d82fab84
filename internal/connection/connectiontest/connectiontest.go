// Package connectiontest runs a real OAuth-protected MCP server for tests, built from the
// official go-sdk as the MCP authorization spec has one: a streamable HTTP handler behind
// auth.RequireBearerToken (401 with a resource_metadata challenge), its RFC 9728 metadata
// naming a real hydra (internal/identity/hydratest) as authorization server, and a verifier
// of hydra's JWT access tokens against hydra's JWKS. Its tools: whoami (the token's sub) and
// echo. Options serve broken metadata for negative tests; AuthServer serves crafted
// authorization-server metadata.
package connectiontest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/xemahq/xema/internal/identity/hydratest"
)

// Path is the MCP endpoint's path on the server; the metadata is at RFC 9728's well-known
// URL with that path inserted.
const (
	Path         = "/mcp"
	MetadataPath = "/.well-known/oauth-protected-resource" + Path
)

// Server is one running protected MCP server.
type Server struct {
	// URL is the MCP endpoint, and the resource its metadata names.
	URL string
	// MetadataURL is where its protected-resource metadata is served (also when an option
	// keeps it from being served).
	MetadataURL string
	// Issuer is the authorization server its metadata names.
	Issuer string

	mu    sync.Mutex
	calls []Call
}

// Call is one tool call the server answered, and whose token it carried.
type Call struct {
	Tool    string
	Subject string
}

// Calls are the tool calls answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Subjects are the subs of the tokens of the tool calls answered so far, in order.
func (s *Server) Subjects() []string {
	var out []string
	for _, c := range s.Calls() {
		out = append(out, c.Subject)
	}
	return out
}

type options struct {
	issuer      string
	resource    string
	scopes      []string
	noChallenge bool
	noMetadata  bool
	listen      string
}

// Option changes what the server serves.
type Option func(*options)

// WithIssuer names issuer as the authorization server instead of hydra's (e.g. an
// AuthServer's); its tokens are then not verifiable, which a discovery test never needs.
func WithIssuer(issuer string) Option { return func(o *options) { o.issuer = issuer } }

// WithResource has the metadata name resource instead of the server's URL.
func WithResource(resource string) Option { return func(o *options) { o.resource = resource } }

// WithScopes has the metadata advertise scopes (scopes_supported) and the server require them.
func WithScopes(scopes ...string) Option { return func(o *options) { o.scopes = scopes } }

// WithoutChallenge answers 401 without naming the metadata URL (resource_metadata): a client
// must find it at the well-known URL.
func WithoutChallenge() Option { return func(o *options) { o.noChallenge = true } }

// WithoutMetadata serves no protected-resource metadata at all (and no challenge naming it).
func WithoutMetadata() Option { return func(o *options) { o.noMetadata, o.noChallenge = true, true } }

// Listen serves on addr (e.g. "127.0.0.2:0") instead of 127.0.0.1.
func Listen(addr string) Option { return func(o *options) { o.listen = addr } }

// Start runs the server until the test ends. hydra is the authorization server whose tokens
// it accepts; it may be nil with WithIssuer.
func Start(t testing.TB, hydra *hydratest.Server, opts ...Option) *Server {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if hydra == nil && o.issuer == "" {
		t.Fatal("connectiontest: Start needs a hydra or WithIssuer")
	}
	s := &Server{Issuer: o.issuer}
	verify := refuseAll
	if hydra != nil {
		if s.Issuer == "" {
			s.Issuer = hydra.Issuer
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		keys, err := keyfunc.NewDefaultCtx(ctx, []string{hydra.JWKSURL()})
		if err != nil {
			t.Fatalf("connectiontest: hydra's JWKS: %v", err)
		}
		verify = verifier(keys, hydra.Issuer)
	}

	srv := mcp.NewServer(&mcp.Implementation{Name: "connectiontest", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "whoami", Description: "The subject of the caller's token."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, whoami, error) {
			sub := s.record(req, "whoami")
			return nil, whoami{Subject: sub}, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Answers its text."},
		func(ctx context.Context, req *mcp.CallToolRequest, in echo) (*mcp.CallToolResult, echo, error) {
			s.record(req, "echo")
			return nil, in, nil
		})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})

	mux := http.NewServeMux()
	var metadataURL string // set once the listener's address is known
	mux.Handle(Path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ro := &auth.RequireBearerTokenOptions{Scopes: o.scopes}
		if !o.noChallenge {
			ro.ResourceMetadataURL = metadataURL
		}
		auth.RequireBearerToken(verify, ro)(handler).ServeHTTP(w, r)
	}))
	hs := httptest.NewUnstartedServer(mux)
	if o.listen != "" {
		l, err := net.Listen("tcp", o.listen)
		if err != nil {
			t.Fatalf("connectiontest: listen %s: %v", o.listen, err)
		}
		hs.Listener.Close()
		hs.Listener = l
	}
	hs.Start()
	t.Cleanup(hs.Close)
	s.URL = hs.URL + Path
	s.MetadataURL = hs.URL + MetadataPath
	metadataURL = s.MetadataURL
	if !o.noMetadata {
		resource := s.URL
		if o.resource != "" {
			resource = o.resource
		}
		mux.Handle(MetadataPath, auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
			Resource: resource, AuthorizationServers: []string{s.Issuer}, ScopesSupported: o.scopes,
			BearerMethodsSupported: []string{"header"}, ResourceName: "connectiontest",
		}))
	}
	return s
}

type whoami struct {
	Subject string `json:"subject"`
}

type echo struct {
	Text string `json:"text"`
}

func (s *Server) record(req *mcp.CallToolRequest, tool string) string {
	var sub string
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		sub = req.Extra.TokenInfo.UserID
	}
	s.mu.Lock()
	s.calls = append(s.calls, Call{Tool: tool, Subject: sub})
	s.mu.Unlock()
	return sub
}

func refuseAll(context.Context, string, *http.Request) (*auth.TokenInfo, error) {
	return nil, fmt.Errorf("%w: no authorization server to verify against", auth.ErrInvalidToken)
}

// verifier checks a hydra JWT access token: signature (hydra's JWKS), iss, exp. Its
// audience is not checked: hydra does not put the RFC 8707 resource in aud.
func verifier(keys keyfunc.Keyfunc, issuer string) auth.TokenVerifier {
	return func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		claims := jwt.MapClaims{}
		_, err := jwt.ParseWithClaims(token, claims, keys.KeyfuncCtx(ctx), jwt.WithIssuer(issuer),
			jwt.WithExpirationRequired(), jwt.WithValidMethods([]string{"RS256", "ES256"}), jwt.WithLeeway(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
		}
		sub, _ := claims.GetSubject()
		exp, _ := claims.GetExpirationTime()
		info := &auth.TokenInfo{UserID: sub, Expiration: exp.Time}
		if scp, ok := claims["scp"].([]any); ok {
			for _, v := range scp {
				if s, ok := v.(string); ok {
					info.Scopes = append(info.Scopes, s)
				}
			}
		}
		return info, nil
	}
}

// WhoAmI calls the server's whoami tool with token as the bearer token, through the go-sdk
// client, and returns the subject it answers.
func (s *Server) WhoAmI(ctx context.Context, token string) (string, error) {
	res, err := s.CallTool(ctx, token, "whoami", map[string]any{})
	if err != nil {
		return "", err
	}
	var w whoami
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &w); err != nil {
		return "", fmt.Errorf("whoami: %w", err)
	}
	return w.Subject, nil
}

// CallTool calls tool on the server with token as the bearer token.
func (s *Server) CallTool(ctx context.Context, token, tool string, args map[string]any) (*mcp.CallToolResult, error) {
	hc := &http.Client{Transport: bearer{token: token, rt: http.DefaultTransport}}
	c := mcp.NewClient(&mcp.Implementation{Name: "connectiontest-client", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: hc, MaxRetries: -1,
		DisableStandaloneSSE: true}, nil)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return nil, fmt.Errorf("call %s: %w", tool, err)
	}
	if res.IsError {
		return nil, errors.New("call " + tool + ": tool error")
	}
	return res, nil
}

type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// AuthServer serves crafted authorization-server metadata (RFC 8414, at
// /.well-known/oauth-authorization-server) on listen ("" is 127.0.0.1:0) until the test
// ends, and returns its issuer URL. meta builds the document from the issuer; Metadata is a
// valid one to start from.
func AuthServer(t testing.TB, listen string, meta func(issuer string) map[string]any) string {
	t.Helper()
	var issuer string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(meta(issuer))
	})
	hs := httptest.NewUnstartedServer(mux)
	if listen != "" {
		l, err := net.Listen("tcp", listen)
		if err != nil {
			t.Fatalf("connectiontest: listen %s: %v", listen, err)
		}
		hs.Listener.Close()
		hs.Listener = l
	}
	hs.Start()
	t.Cleanup(hs.Close)
	issuer = hs.URL
	return issuer
}

// Metadata is valid authorization-server metadata for issuer, its endpoints below it,
// without a registration endpoint.
func Metadata(issuer string) map[string]any {
	base := strings.TrimSuffix(issuer, "/")
	return map[string]any{
		"issuer":                           issuer,
		"authorization_endpoint":           base + "/authorize",
		"token_endpoint":                   base + "/token",
		"revocation_endpoint":              base + "/revoke",
		"jwks_uri":                         base + "/jwks",
		"response_types_supported":         []string{"code"},
		"grant_types_supported":            []string{"authorization_code", "refresh_token"},
		"code_challenge_methods_supported": []string{"S256"},
		"scopes_supported":                 []string{"read", "offline_access"},
	}
}
