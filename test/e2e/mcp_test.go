package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bearer adds a bearer token to every request of the MCP client.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// mcpSession connects the official go-sdk client to the gateway's /mcp with token.
func mcpSession(t *testing.T, g *gateway, token string) (*mcp.ClientSession, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: g.URL + "/mcp", MaxRetries: -1, DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}}}
	s, err := client.Connect(ctx, tr, nil)
	if err == nil {
		t.Cleanup(func() { _ = s.Close() })
	}
	return s, err
}

// callTool calls a tool and decodes its JSON text content.
func callTool(t *testing.T, s *mcp.ClientSession, name string, args any) (map[string]any, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s: %d content items", name, len(res.Content))
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("%s: content %T", name, res.Content[0])
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(text.Text), &body); err != nil {
		t.Fatalf("%s: content %q: %v", name, text.Text, err)
	}
	return body, res.IsError
}

// TestMCP drives the six meta-tools through the official go-sdk client on both engines.
func TestMCP(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		agent := g.token("--subject", "agent:support-bot", "--env", "project")
		s, err := mcpSession(t, g, agent)
		if err != nil {
			t.Fatalf("connect: %v\n", err)
		}

		t.Run("six tools", func(t *testing.T) {
			res, err := s.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range res.Tools {
				names = append(names, tool.Name)
			}
			slices.Sort(names)
			want := []string{"xema_capabilities_describe", "xema_capabilities_explain", "xema_capabilities_invoke",
				"xema_capabilities_plan", "xema_capabilities_preflight", "xema_capabilities_search"}
			if !slices.Equal(names, want) {
				t.Errorf("tools %v, want %v", names, want)
			}
		})

		t.Run("each tool", func(t *testing.T) {
			body, isErr := callTool(t, s, "xema_capabilities_search", map[string]any{"query": "page"})
			if isErr || !slices.Contains(refsOf(body, "capabilities"), "kb:page.read@1") {
				t.Errorf("search: %v", body)
			}
			body, isErr = callTool(t, s, "xema_capabilities_describe", map[string]any{"refs": []string{"kb:page.read@1"}})
			if isErr || !slices.Equal(refsOf(body, "capabilities"), []string{"kb:page.read@1"}) {
				t.Errorf("describe: %v", body)
			}
			body, isErr = callTool(t, s, "xema_capabilities_plan", map[string]any{"goalCapabilityRef": "kb:page.read@1", "fromResourceTypes": []string{"kb_page"}})
			if isErr || body["found"] != true || !slices.Equal(refsOf(body, "steps"), []string{"kb:page.read@1"}) {
				t.Errorf("plan: %v", body)
			}
			body, isErr = callTool(t, s, "xema_capabilities_preflight", map[string]any{"ref": "kb:page.read@1"})
			if isErr || body["ready"] != true {
				t.Errorf("preflight: %v", body)
			}
			body, isErr = callTool(t, s, "xema_capabilities_explain", map[string]any{"capabilityRef": "kb:page.read@1", "denialCode": "MISSING_GRANT"})
			if isErr || str(body, "domain") != "kb" || str(body, "biome.id") != "demo" {
				t.Errorf("explain: %v", body)
			}
			body, isErr = callTool(t, s, "xema_capabilities_search", map[string]any{"limit": 1, "cursor": "forged"})
			if !isErr || str(body, "code") != "INVALID_CURSOR" {
				t.Errorf("search with a forged cursor: %v", body)
			}
			body, isErr = callTool(t, s, "xema_capabilities_describe", map[string]any{"refs": []string{"kb:page.read@1"}, "extra": 1})
			if !isErr || str(body, "code") == "" {
				t.Errorf("describe with an unknown argument: %v", body)
			}
		})

		t.Run("invoke equals HTTP", func(t *testing.T) {
			args := map[string]any{"ref": "kb:page.read@1", "input": map[string]any{"pageId": "welcome"}}
			viaMCP, isErr := callTool(t, s, "xema_capabilities_invoke", args)
			viaHTTP := g.post("/v1/capabilities/invoke", agent, args)
			expect(t, viaHTTP, http.StatusOK)
			if isErr {
				t.Fatalf("invoke over MCP: %v", viaMCP)
			}
			for _, k := range []string{"output", "obligations"} {
				a, _ := json.Marshal(viaMCP[k])
				b, _ := json.Marshal(viaHTTP.Body[k])
				if string(a) != string(b) {
					t.Errorf("%s over MCP %s, over HTTP %s", k, a, b)
				}
			}
			// Same audit as HTTP: the MCP call's record is there at once.
			rec := g.get("/v1/audit/"+str(viaMCP, "auditId"), agent)
			expect(t, rec, http.StatusOK)
			if str(rec.Body, "decision") != "allowed" || str(rec.Body, "capability") != "kb:page.read@1" {
				t.Errorf("audit of the MCP call: %s", rec.Raw)
			}
		})

		t.Run("denied invoke", func(t *testing.T) {
			public, err := mcpSession(t, g, g.token("--subject", "agent:support-bot", "--env", "public-session"))
			if err != nil {
				t.Fatal(err)
			}
			body, isErr := callTool(t, public, "xema_capabilities_invoke", map[string]any{"ref": "workflow:run.start@1", "input": map[string]any{"workflowId": "onboarding"}})
			if !isErr || str(body, "code") != "DENIED" || str(body, "decision") != "denied" ||
				!strings.HasPrefix(str(body, "auditId"), "deny_") || !slices.Contains(reasonCodes(body), "ENVIRONMENT_NOT_ALLOWED") {
				t.Errorf("denied invoke over MCP: isError %v, %v", isErr, body)
			}
		})

		t.Run("unauthenticated", func(t *testing.T) {
			const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`
			forged := agent[:len(agent)-4] + "AAAA"
			for name, token := range map[string]string{"missing": "", "forged": forged, "garbage": "not-a-jwt"} {
				req, _ := http.NewRequest(http.MethodPost, g.URL+"/mcp", strings.NewReader(initialize))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				if r := g.do(req); r.Status != http.StatusUnauthorized {
					t.Errorf("%s token: %d %s", name, r.Status, r.Raw)
				}
				if _, err := mcpSession(t, g, token); err == nil {
					t.Errorf("%s token: the go-sdk client connected", name)
				}
			}
		})
	})
}
