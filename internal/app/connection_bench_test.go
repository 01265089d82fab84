package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/connection/connectiontest"
	"github.com/xemahq/xema/internal/cpubench"
	"github.com/xemahq/xema/internal/federation"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/store"
)

// parallelCallers × GOMAXPROCS goroutines call at once.
const parallelCallers = 8

// connectionToken is the access token the benchmark's authorization server issues: good
// for a year, so no call refreshes it.
const connectionToken = "bench-connection-token"

// protectedMCP is a go-sdk MCP server over streamable HTTP on loopback (the tool echo)
// behind the go-sdk's auth.RequireBearerToken, taking token alone; with issuer it serves
// RFC 9728 metadata naming that authorization server (for discovery). It returns its MCP
// endpoint.
func protectedMCP(b testing.TB, token, issuer string) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	type echo struct {
		Text string `json:"text"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Answers its text."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echo) (*mcp.CallToolResult, echo, error) {
			return nil, in, nil
		})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	verify := func(_ context.Context, got string, _ *http.Request) (*auth.TokenInfo, error) {
		if got != token {
			return nil, fmt.Errorf("%w: not the benchmark's token", auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{UserID: "bench", Expiration: time.Now().Add(time.Hour)}, nil
	}
	mux := http.NewServeMux()
	ts := httptest.NewServer(mux)
	b.Cleanup(ts.Close)
	opts := &auth.RequireBearerTokenOptions{}
	if issuer != "" {
		opts.ResourceMetadataURL = ts.URL + connectiontest.MetadataPath
		mux.Handle(connectiontest.MetadataPath, auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
			Resource: ts.URL + connectiontest.Path, AuthorizationServers: []string{issuer}, BearerMethodsSupported: []string{"header"}}))
	}
	mux.Handle(connectiontest.Path, auth.RequireBearerToken(verify, opts)(handler))
	return ts.URL + connectiontest.Path
}

// authServer is an authorization server whose token endpoint issues connectionToken for
// any code (the benchmark measures calls, not the flow); it returns its issuer.
func authServer(b testing.TB) string {
	mux := http.NewServeMux()
	ts := httptest.NewServer(mux)
	b.Cleanup(ts.Close)
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(connectiontest.Metadata(ts.URL))
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": connectionToken, "token_type": "Bearer",
			"expires_in": 365 * 24 * 3600, "refresh_token": "bench-refresh"})
	})
	return ts.URL
}

// grantServer grants the default org the version of a registered server, the rate limit of
// ref lifted out of reach (every call runs).
func grantServer(b testing.TB, f *apptest.Fixture, res *federation.SyncResult, ref string) {
	b.Helper()
	if res == nil || res.Digest == nil {
		b.Fatalf("no version to grant: %+v", res)
	}
	req, _ := json.Marshal(map[string]any{"biomeId": res.Server.ProviderID, "version": res.Server.Version, "digestHash": res.Digest.Hash,
		"customize": map[string]any{ref: map[string]any{"rateLimit": map[string]any{"requests": 100000, "per": "1s"}}}})
	if _, err := f.App.Publisher.Install(context.Background(), req, identity.DefaultOrg, "user:root"); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkConnectionCall: the same tool of the same MCP server through the whole funnel,
// in process (SQLite, the audit records durable), by an agent, cached paths (one decision,
// one pooled session): service-token, the server registered with auth service-token (the
// gateway's own static token); connection, the server registered with auth oauth and the
// org connected (the token of the org's connection, read, opened and checked for expiry at
// each call). Issue 37: connection ≤ 1.1× service-token in CPU. cpu-ns/op is the process's,
// the in-process MCP server's included (the same in both rows).
func BenchmarkConnectionCall(b *testing.B) {
	ctx := context.Background()
	// The servers first: the gateway, closed first, closes its sessions to them.
	staticURL, connURL := protectedMCP(b, apptest.ServiceToken, ""), protectedMCP(b, connectionToken, authServer(b))
	f := apptest.New(b, apptest.Options{PublicURL: "https://gateway.example"})
	org := identity.DefaultOrg

	static, err := f.App.Federation.RegisterServer(ctx, federation.Registration{ProviderID: "static", Transport: federation.TransportHTTP,
		URL: staticURL, Auth: &federation.RegistrationAuth{Kind: federation.AuthServiceToken}}, org, "user:alice")
	if err != nil {
		b.Fatal(err)
	}
	grantServer(b, f, static, "static:echo@1")

	if _, err := f.App.Federation.RegisterServer(ctx, federation.Registration{ProviderID: "conn", Transport: federation.TransportHTTP,
		URL: connURL, Auth: &federation.RegistrationAuth{Kind: federation.AuthOAuth,
			Owner: store.OwnerOrg, ClientID: "bench"}}, org, "user:alice"); err != nil {
		b.Fatal(err)
	}
	started, err := f.App.Connections.Start(ctx, org, "conn", connection.Owner{Kind: store.OwnerOrg}, "user:alice")
	if err != nil {
		b.Fatal(err)
	}
	u, err := url.Parse(started.URL)
	if err != nil {
		b.Fatal(err)
	}
	done, err := f.App.Federation.Complete(ctx, u.Query().Get("state"), "bench-code", "", "")
	if err != nil || done.Sync == nil {
		b.Fatalf("connect: %+v, %v", done, err)
	}
	grantServer(b, f, done.Sync, "conn:echo@1")

	bot := apptest.Exec("agent:support-bot", "project", "")
	input := json.RawMessage(`{"text":"hi"}`)
	for _, row := range []struct{ name, ref string }{{"service-token", "static:echo@1"}, {"connection", "conn:echo@1"}} {
		call := func() error {
			res, err := f.App.Gateway.Invoke(ctx, bot, gateway.Request{Ref: row.ref, Input: input})
			if err == nil && res.Denial != nil {
				err = fmt.Errorf("denied: %s %s", res.Denial.Code, res.Denial.Message)
			}
			if err != nil {
				return fmt.Errorf("invoke %s: %w", row.ref, err)
			}
			return nil
		}
		b.Run(row.name, func(b *testing.B) {
			for range 20 { // the session, the decision cache, the server's record: warm
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			// Concurrent callers, as the load harness's workers: the audit writer batches.
			b.SetParallelism(parallelCallers)
			defer cpubench.PerOp(b)()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := call(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
