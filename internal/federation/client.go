package federation

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/runner"
	"github.com/xemahq/xema/internal/store"
)

// Error codes of registration, sync and calls.
const (
	CodeInvalidServer = "INVALID_MCP_SERVER"
	CodeServerExists  = "MCP_SERVER_EXISTS"
	CodeProviderTaken = "PROVIDER_ID_TAKEN"
	CodeUnknownServer = "UNKNOWN_MCP_SERVER"
	CodeToolCollision = "TOOL_NAME_COLLISION"
	CodeInvalidTool   = "INVALID_TOOL"
	CodeSyncConflict  = "SYNC_CONFLICT"
	CodeToolError     = "TOOL_ERROR"
	CodeProtocolError = "PROTOCOL_ERROR"
	CodeUnreachable   = runner.CodeUnreachable
	CodeTimeout       = runner.CodeProviderTimeout
)

// dialer opens client sessions to registered servers.
type dialer struct {
	// Tokens is the gateway's outbound token source (auth kind service-token).
	Tokens runner.TokenSource
	client *mcp.Client
	// transport dials through the egress policy; stdio holds the operator's declarations.
	transport http.RoundTripper
	stdio     map[string]StdioServer
}

// newDialer returns a dialer; toolsChanged, when not nil, hears every session's
// notifications/tools/list_changed.
func newDialer(tokens runner.TokenSource, toolsChanged func(*mcp.ClientSession)) *dialer {
	var opts *mcp.ClientOptions
	if toolsChanged != nil {
		opts = &mcp.ClientOptions{ToolListChangedHandler: func(_ context.Context, req *mcp.ToolListChangedRequest) {
			// Off the session's goroutine: the pool may be closing this session under its lock.
			go toolsChanged(req.Session)
		}}
	}
	return &dialer{Tokens: tokens, client: mcp.NewClient(&mcp.Implementation{Name: "xema-gateway", Version: "1"}, opts)}
}

// connect opens a session; the caller closes it. A listening session (the pooled one) keeps
// the standalone SSE stream of a streamable-http server open for its notifications, so its
// HTTP client has no overall timeout: contexts bound each exchange instead. A stdio server
// runs with a minimal environment: the gateway's own variables (keys, DSNs) never reach it.
func (d *dialer) connect(ctx context.Context, srv store.MCPServer, listen bool) (*mcp.ClientSession, error) {
	var t mcp.Transport
	switch srv.Transport {
	case TransportHTTP:
		rt := d.transport
		if rt == nil {
			rt = egress.New(nil).Transport()
		}
		hc := &http.Client{Transport: rt, CheckRedirect: egress.NoRedirect}
		switch srv.Auth {
		case AuthServiceToken:
			hc.Transport = bearer{tokens: d.Tokens, next: rt, audience: Audience(srv)}
		case AuthOAuth:
			// The token rides in each request's context (the call's connection): a
			// standalone stream, opened with the session's context, would carry none.
			hc.Transport = connectionBearer{next: rt, audience: Audience(srv)}
			listen = false
		}
		if !listen {
			hc.Timeout = time.Duration(srv.TimeoutMs) * time.Millisecond
		}
		t = &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: !listen}
	case TransportStdio:
		// Only the operator's declaration runs, never a command line from the store.
		decl, ok := d.stdio[srv.ProviderID]
		if !ok {
			return nil, fault.New(fault.Provider, CodeUnknownServer, "stdio MCP server %q is not declared on this gateway", srv.ProviderID)
		}
		cmd := exec.Command(decl.Command, decl.Args...)
		cmd.Env = decl.environ()
		t = &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	default:
		return nil, fault.New(fault.Invalid, CodeInvalidServer, "unknown transport %q", srv.Transport)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(srv.TimeoutMs)*time.Millisecond)
	defer cancel()
	cs, err := d.client.Connect(ctx, t, nil)
	if err != nil {
		return nil, callError(ctx, srv.ProviderID, "initialize", err)
	}
	return cs, nil
}

// listTools connects, reads every page of tools/list within the server's timeout, and closes.
func (d *dialer) listTools(ctx context.Context, srv store.MCPServer) ([]*mcp.Tool, error) {
	cs, err := d.connect(ctx, srv, false)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Duration(srv.TimeoutMs)*time.Millisecond)
	defer cancel()
	var tools []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, callError(ctx, srv.ProviderID, "tools/list", err)
		}
		tools = append(tools, t)
	}
	return tools, nil
}

// bearer adds the gateway's service token to every request to the server.
type bearer struct {
	tokens   runner.TokenSource
	next     http.RoundTripper
	audience string
}

// Audience is the audience of the tokens sent to srv: its URL's origin, so a token a server
// received is good for that server only, and never for the gateway's own API.
func Audience(srv store.MCPServer) string { return runner.Audience(srv.URL) }

// sameOrigin reports whether u is at the origin the token was minted for.
func sameOrigin(u *url.URL, audience string) bool { return runner.Audience(u.String()) == audience }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	ts := b.tokens
	if ts == nil {
		return nil, fault.New(fault.Internal, runner.CodeNoToken, "the gateway has no outbound token source")
	}
	if !sameOrigin(r.URL, b.audience) { // never hand a server's token to another origin
		return nil, fault.New(fault.Provider, runner.CodeRedirect, "the MCP server's request left its registered origin")
	}
	tok, err := ts.Token(r.Context(), b.audience)
	if err != nil {
		return nil, fault.Wrap(err, fault.Internal, runner.CodeNoToken, "the gateway could not mint its service token")
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+tok)
	return b.next.RoundTrip(r)
}

// callError types a failed exchange with the server. Neither the server's own JSON-RPC error
// message (often a Go error of the server: addresses, paths) nor transport details are
// answered: they stay in Err, which the gateway logs with the call's auditId.
func callError(ctx context.Context, provider, op string, err error) *fault.Error {
	var re *fault.Error
	if errors.As(err, &re) {
		return re
	}
	if te := runner.TransportError(provider, err); te != nil {
		return te
	}
	var je *jsonrpc.Error
	switch {
	case errors.As(err, &je):
		return fault.Wrap(err, fault.Provider, CodeProtocolError, "%s answered %s with JSON-RPC error %d", provider, op, je.Code)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fault.Wrap(err, fault.Timeout, CodeTimeout, "%s did not answer %s in time", provider, op)
	}
	slog.Warn("mcp server unreachable", "provider", provider, "op", op, "err", err)
	return fault.Wrap(err, fault.Provider, CodeUnreachable, "%s could not be reached for %s (connection failed or the server exited)", provider, op)
}

// pool keeps one client session per server and generation, reconnecting after a session
// ends. A failed call is never retried: tools/call is not known to be idempotent.
type pool struct {
	d  *dialer
	mu sync.Mutex
	by map[string]*pooled
}

type pooled struct {
	provider string
	gen      int64
	cs       *mcp.ClientSession
	dead     chan struct{}
}

// maxSessions bounds the pooled sessions: a server taking each person's own connection has
// one session per person who called it.
const maxSessions = 1024

// sessionKey is the pooled session of a server and, for an oauth server, the connection the
// call goes through: a server binds a session to the account of the token it was opened
// with, and a reconnect (a new connection, perhaps another account) opens a new session.
func sessionKey(provider, connectionID string) string {
	if connectionID == "" {
		return provider
	}
	return provider + "\x00" + connectionID
}

func (p *pool) session(ctx context.Context, srv store.MCPServer, key string) (*mcp.ClientSession, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.by[key]; ok {
		select {
		case <-e.dead:
		default:
			if e.gen == srv.Generation {
				return e.cs, nil
			}
			_ = e.cs.Close()
		}
		delete(p.by, key)
	}
	if len(p.by) >= maxSessions {
		for k, e := range p.by { // any one: a closed session reconnects at its next call
			_ = e.cs.Close()
			delete(p.by, k)
			break
		}
	}
	cs, err := p.d.connect(ctx, srv, true)
	if err != nil {
		return nil, err
	}
	e := &pooled{provider: srv.ProviderID, gen: srv.Generation, cs: cs, dead: make(chan struct{})}
	go func() { _ = cs.Wait(); close(e.dead) }()
	p.by[key] = e
	return cs, nil
}

// provider names the server cs is the pooled session of.
func (p *pool) provider(cs *mcp.ClientSession) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.by {
		if e.cs == cs {
			return e.provider, true
		}
	}
	return "", false
}

// drop forgets cs so the next call reconnects.
func (p *pool) drop(key string, cs *mcp.ClientSession) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.by[key]; ok && e.cs == cs {
		delete(p.by, key)
	}
	_ = cs.Close()
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, e := range p.by {
		_ = e.cs.Close()
		delete(p.by, id)
	}
}

// toolRunner runs one federated capability as tools/call.
type toolRunner struct {
	pool *pool
	srv  store.MCPServer
	name string
	// token is set for a server taking connections: the context carrying the token of the
	// connection the call goes through, and that connection's id.
	token func(ctx context.Context) (context.Context, string, error)
}

// Kind is "mcp-external".
func (toolRunner) Kind() string { return RunnerKind }

// Run calls the tool with the validated input as arguments. The output is the result's
// structuredContent when present, else its content array; an isError result is TOOL_ERROR.
func (r toolRunner) Run(ctx context.Context, call kernel.Call) (json.RawMessage, error) {
	var connID string
	if r.token != nil {
		var err error
		if ctx, connID, err = r.token(ctx); err != nil {
			fe := fault.Of(err)
			fe.NotRun = true // refused before the server was asked anything
			return nil, fe
		}
	}
	key := sessionKey(r.srv.ProviderID, connID)
	cs, err := r.pool.session(ctx, r.srv, key)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(r.srv.TimeoutMs)*time.Millisecond)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: r.name, Arguments: call.Input})
	if err != nil {
		var je *jsonrpc.Error
		if !errors.As(err, &je) {
			r.pool.drop(key, cs) // the session may be broken: reconnect next time
		}
		return nil, callError(ctx, r.srv.ProviderID, "tools/call "+r.name, err)
	}
	if res.IsError {
		return nil, fault.New(fault.Provider, CodeToolError, "tool %q of %s reported an error: %s", r.name, r.srv.ProviderID, clip(text(res.Content), 500))
	}
	var out any = res.Content
	if res.StructuredContent != nil {
		out = res.StructuredContent
	}
	if out == nil {
		out = []mcp.Content{}
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, fault.Wrap(err, fault.Internal, runner.CodeBadResponse, "the tool's result is not JSON")
	}
	return raw, nil
}

func text(content []mcp.Content) string {
	var parts []string
	for _, c := range content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	if len(parts) == 0 {
		return "(no text)"
	}
	return strings.Join(parts, " ")
}

// WrapTransport wraps the transport of streamable-http servers (e.g. in client spans that
// propagate the trace context); call it before the first connection.
func (f *Federation) WrapTransport(wrap func(http.RoundTripper) http.RoundTripper) {
	f.dialer.transport = wrap(f.dialer.transport)
}
