package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xemahq/xema/internal/connection/connectiontest"
	"github.com/xemahq/xema/internal/identity/hydratest"
)

// callback follows the authorization server's redirect to the gateway's callback, as the
// person's browser would (no gateway token; the cookies POST /v1/connections set, from
// started's headers, unless nil), and returns its status and page.
func callback(t *testing.T, landed string, started http.Header) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, landed, nil)
	for _, c := range (&http.Response{Header: started}).Cookies() {
		req.AddCookie(c)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// elicitingSession is an MCP session of a client that declares URL-mode elicitation.
func elicitingSession(t *testing.T, g *gateway, token string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e-eliciting", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept"}, nil
		}})
	tr := &mcp.StreamableClientTransport{Endpoint: g.URL + "/mcp", MaxRetries: -1, DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}}}
	s, err := client.Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestConnections registers a real OAuth-protected MCP server (the official go-sdk's bearer
// middleware and protected-resource metadata, verifying a real hydra's tokens), connects a
// person through hydra's authorization-code flow, and calls its tools as that person, for
// them through an agent, and as someone without a connection; then disconnects. Both engines.
func TestConnections(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		// Tokens live 20s: shorter than the gateway's refresh margin, so every call refreshes
		// (a rotated refresh token each time) without the caller noticing.
		hydra := hydratest.StartWithLogin(t, map[string]hydratest.Person{
			"ann": {Subject: "ann@tools"}, "bob": {Subject: "bob@tools"}, "": {Subject: "nobody@tools"},
		}, append(hydratest.DynamicRegistration(), "TTL_ACCESS_TOKEN=20s")...)
		srv := connectiontest.Start(t, hydra)
		g := startGateway(t, e.store(t))
		admin := g.adminToken()
		ann := g.token("--subject", "user:ann", "--org-role", "org_member", "--env", "project")
		bob := g.token("--subject", "user:bob", "--org-role", "org_member", "--env", "project")
		forAnn := g.token("--subject", "user:ann", "--org-role", "org_member", "--env", "project", "--act", "agent:support-bot")
		agent := g.token("--subject", "agent:support-bot", "--env", "project")

		// Bad registrations change nothing and say what is wrong.
		noOwner := g.post("/v1/mcp-servers", admin, map[string]any{"providerId": "noowner", "transport": "streamable-http",
			"url": srv.URL, "auth": map[string]any{"kind": "oauth"}})
		if noOwner.Status != http.StatusBadRequest || !strings.Contains(string(noOwner.Raw), "/auth/owner") {
			t.Fatalf("oauth without owner: %d %s", noOwner.Status, noOwner.Raw)
		}
		bare := connectiontest.Start(t, hydra, connectiontest.WithoutMetadata())
		noMeta := g.post("/v1/mcp-servers", admin, map[string]any{"providerId": "nometa", "transport": "streamable-http",
			"url": bare.URL, "auth": map[string]any{"kind": "oauth", "owner": "user"}})
		if noMeta.Status != http.StatusBadRequest || str(noMeta.Body, "code") != "INVALID_OAUTH_SERVER" {
			t.Fatalf("a server without metadata: %d %s", noMeta.Status, noMeta.Raw)
		}
		if list := g.get("/v1/mcp-servers", admin); strings.Contains(string(list.Raw), "noowner") || strings.Contains(string(list.Raw), "nometa") {
			t.Fatalf("a refused registration was stored: %s", list.Raw)
		}

		reg := g.post("/v1/mcp-servers", admin, map[string]any{"providerId": "tools", "transport": "streamable-http",
			"url": srv.URL, "auth": map[string]any{"kind": "oauth", "owner": "user"}})
		expect(t, reg, http.StatusCreated)
		if str(reg.Body, "server.auth") != "oauth" || strings.Contains(string(reg.Raw), "clientSecret") {
			t.Fatalf("registration: %s", reg.Raw)
		}

		mine := g.get("/v1/connections", ann)
		expect(t, mine, http.StatusOK)
		if !strings.Contains(string(mine.Raw), `"providerId":"tools","owner":"user"`) || !strings.Contains(string(mine.Raw), `"status":"missing"`) {
			t.Fatalf("ann's connections before connecting: %s", mine.Raw)
		}

		if out, err := g.run("connection", "connect", "tools", "--server", g.URL, "--token", ann); err != nil || !strings.Contains(out, g.URL+"/console/connections") {
			t.Fatalf("xema connection connect: %v %s", err, out)
		}
		if out, err := g.run("connection", "connect", "nosuch", "--server", g.URL, "--token", ann); err == nil || !strings.Contains(out, "no OAuth-protected server") {
			t.Fatalf("xema connection connect of an unknown server: %v %s", err, out)
		}

		// Ann connects through hydra's login and consent; the callback lists the tools.
		start := g.post("/v1/connections", ann, map[string]any{"providerId": "tools"})
		expect(t, start, http.StatusOK)
		landed := hydra.Authorize(t, str(start.Body, "url"), "ann")
		// Another browser (a person sent the link by whoever started it) cannot finish it,
		// and leaves it to its starter.
		if status, page := callback(t, landed.String(), nil); status != http.StatusBadRequest || !strings.Contains(page, "not started in this browser") {
			t.Fatalf("a callback from another browser: %d %s", status, page)
		}
		// Ann's browser, as a cookie jar: a second Connect in another tab, then a link to a
		// callback of another (well-formed) state someone sent her, leave the first
		// request's cookie in place, so it still finishes.
		jar, _ := cookiejar.New(nil)
		gw, _ := url.Parse(g.URL)
		jar.SetCookies(gw, (&http.Response{Header: start.Header}).Cookies())
		second := g.post("/v1/connections", ann, map[string]any{"providerId": "tools"})
		expect(t, second, http.StatusOK)
		jar.SetCookies(gw, (&http.Response{Header: second.Header}).Cookies())
		browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		stray, err := browser.Get(g.URL + "/v1/connections/callback?code=x&state=" + strings.Repeat("A", 43))
		if err != nil {
			t.Fatal(err)
		}
		stray.Body.Close()
		if stray.StatusCode != http.StatusBadRequest {
			t.Fatalf("a callback of a state this browser did not start: %d", stray.StatusCode)
		}
		resp, err := browser.Get(landed.String())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if status, page := resp.StatusCode, string(b); status != http.StatusOK || !strings.Contains(page, "Connected your account to tools") {
			t.Fatalf("callback: %d %s", status, page)
		}
		if status, page := callback(t, landed.String(), start.Header); status != http.StatusBadRequest || !strings.Contains(page, "INVALID_CONNECTION_STATE") {
			t.Fatalf("a replayed callback: %d %s", status, page)
		}
		servers := g.get("/v1/mcp-servers", admin)
		if !strings.Contains(string(servers.Raw), `"ref":"tools:whoami@1"`) {
			t.Fatalf("the first connection did not list the tools: %s", servers.Raw)
		}
		version := "1.0.2"
		expect(t, g.post("/v1/grants", admin, map[string]any{"biomeId": "tools", "version": version,
			"digestHash": g.digestOf(admin, "tools", version)}), http.StatusCreated)

		whoami := map[string]any{"ref": "tools:whoami@1", "input": map[string]any{}}
		r := g.post("/v1/capabilities/invoke", ann, whoami)
		expect(t, r, http.StatusOK)
		if !strings.Contains(string(r.Raw), "ann@tools") {
			t.Fatalf("ann's call ran as %s", r.Raw)
		}
		// An agent acting for ann uses ann's connection: the server sees ann.
		r = g.post("/v1/capabilities/invoke", forAnn, whoami)
		expect(t, r, http.StatusOK)
		if subs := srv.Subjects(); len(subs) != 2 || subs[1] != "ann@tools" {
			t.Fatalf("the server saw %v; want ann's token twice", subs)
		}
		rec := g.get("/v1/audit/"+str(r.Body, "auditId"), admin)
		if !strings.Contains(string(rec.Raw), `"connection":{`) || !strings.Contains(string(rec.Raw), `"person":"user:ann"`) {
			t.Fatalf("the audit record does not name the connection used: %s", rec.Raw)
		}
		conns := g.get("/v1/connections", ann)
		if !strings.Contains(string(conns.Raw), `"refreshedAt":"`) {
			t.Fatalf("a token past its refresh margin was not refreshed: %s", conns.Raw)
		}

		// Bob has no connection: denied before anything runs, told where to connect.
		den := g.post("/v1/capabilities/invoke", bob, whoami)
		if den.Status != http.StatusForbidden || !strings.Contains(string(den.Raw), "CONNECTION_REQUIRED") ||
			!strings.Contains(string(den.Raw), `"kind":"connect"`) || !strings.Contains(string(den.Raw), "/console/connections") {
			t.Fatalf("bob without a connection: %d %s", den.Status, den.Raw)
		}
		why := g.get("/v1/audit/"+str(den.Body, "auditId")+"/why-denied", bob)
		if !strings.Contains(string(why.Raw), "CONNECTION_REQUIRED") {
			t.Fatalf("why-denied: %s", why.Raw)
		}
		pre := g.post("/v1/capabilities/preflight", bob, map[string]any{"ref": "tools:whoami@1"})
		if !strings.Contains(string(pre.Raw), "CONNECTION_REQUIRED") {
			t.Fatalf("preflight: %s", pre.Raw)
		}
		// Over MCP: a client declaring URL elicitation is asked to open the connect page; one
		// that does not gets the denial.
		elicit := elicitingSession(t, g, bob)
		_, err = elicit.CallTool(context.Background(), &mcp.CallToolParams{Name: "xema_capabilities_invoke", Arguments: whoami})
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) || rpcErr.Code != mcp.CodeURLElicitationRequired ||
			!strings.Contains(string(rpcErr.Data), `"mode":"url"`) || !strings.Contains(string(rpcErr.Data), "/console/connections") {
			t.Fatalf("an eliciting client: %v; want URLElicitationRequired naming the connect page", err)
		}
		plain, err := mcpSession(t, g, bob)
		if err != nil {
			t.Fatal(err)
		}
		if body, isErr := callTool(t, plain, "xema_capabilities_invoke", whoami); !isErr || !strings.Contains(fmt.Sprint(body), "CONNECTION_REQUIRED") {
			t.Fatalf("a client without URL elicitation: %v (isError %v)", body, isErr)
		}
		// Bob connects (as the page would have him); the eliciting client's retry runs.
		start = g.post("/v1/connections", bob, map[string]any{"providerId": "tools"})
		expect(t, start, http.StatusOK)
		if status, page := callback(t, hydra.Authorize(t, str(start.Body, "url"), "bob").String(), start.Header); status != http.StatusOK {
			t.Fatalf("bob's callback: %d %s", status, page)
		}
		res, err := elicit.CallTool(context.Background(), &mcp.CallToolParams{Name: "xema_capabilities_invoke", Arguments: whoami})
		if err != nil || res.IsError || !strings.Contains(fmt.Sprint(res.StructuredContent), "bob@tools") {
			t.Fatalf("the retry once connected: %v %v", res, err)
		}
		if den := g.post("/v1/capabilities/invoke", agent, whoami); !strings.Contains(string(den.Raw), "no person") {
			t.Fatalf("an agent acting for no one: %d %s", den.Status, den.Raw)
		}
		if n := len(srv.Calls()); n != 3 {
			t.Fatalf("the server answered %d calls; the denied ones must not reach it", n)
		}

		// Connections are the owner's: bob cannot remove ann's, another org cannot see the server.
		var annConn string
		for _, c := range conns.Body["connections"].([]any) {
			annConn = c.(map[string]any)["id"].(string)
		}
		if r := g.send("DELETE", "/v1/connections/"+annConn, bob, nil); r.Status != http.StatusNotFound {
			t.Fatalf("bob disconnecting ann: %d %s", r.Status, r.Raw)
		}
		zed := g.token("--subject", "user:zed", "--org-role", "org_admin", "--env", "project", "--org", "globex")
		if r := g.post("/v1/connections", zed, map[string]any{"providerId": "tools"}); r.Status != http.StatusNotFound {
			t.Fatalf("another org connecting to tools: %d %s", r.Status, r.Raw)
		}

		off := g.send("DELETE", "/v1/connections/"+annConn, ann, nil)
		expect(t, off, http.StatusOK)
		if off.Body["revoked"] != true {
			t.Fatalf("disconnect: %s", off.Raw)
		}
		if r := g.post("/v1/capabilities/invoke", ann, whoami); !strings.Contains(string(r.Raw), "CONNECTION_REQUIRED") {
			t.Fatalf("after disconnecting: %d %s", r.Status, r.Raw)
		}
		// Ann connects again, signing in with another account at the server's authorization
		// server: her calls now carry that account's token, in a session of their own (a
		// server binds a session to the account it was opened with).
		again := g.post("/v1/connections", ann, map[string]any{"providerId": "tools"})
		expect(t, again, http.StatusOK)
		if status, page := callback(t, hydra.Authorize(t, str(again.Body, "url"), "bob").String(), again.Header); status != http.StatusOK {
			t.Fatalf("ann's reconnect: %d %s", status, page)
		}
		r = g.post("/v1/capabilities/invoke", ann, whoami)
		expect(t, r, http.StatusOK)
		if !strings.Contains(string(r.Raw), "bob@tools") {
			t.Fatalf("after reconnecting with another account the call ran as %s", r.Raw)
		}
		// hydra's tokens: JWT access tokens, and opaque codes and refresh tokens.
		for _, prefix := range []string{"eyJhbGci", "ory_rt_", "ory_ac_", "ory_at_"} {
			if strings.Contains(g.logs.String(), prefix) {
				t.Fatalf("the gateway logged a token (%s…)", prefix)
			}
		}
	})
}
