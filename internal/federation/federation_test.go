package federation

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/store"
)

func yes() *bool { b := true; return &b }

func TestTranslate(t *testing.T) {
	obj := map[string]any{"type": "object"}
	for _, tc := range []struct {
		name      string
		tools     []*mcp.Tool
		code      string
		risk, eff string
	}{
		{"read-only", []*mcp.Tool{{Name: "look", InputSchema: obj, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}}, "", "low", "read"},
		{"destructive", []*mcp.Tool{{Name: "drop", InputSchema: obj, Annotations: &mcp.ToolAnnotations{DestructiveHint: yes()}}}, "", "high", "write"},
		{"no hints", []*mcp.Tool{{Name: "do", InputSchema: obj}}, "", "medium", "write"},
		{"invalid schema", []*mcp.Tool{{Name: "x", InputSchema: map[string]any{"type": "object", "minLength": "two"}}}, CodeInvalidTool, "", ""},
		{"draft-07 dependencies", []*mcp.Tool{{Name: "x", InputSchema: map[string]any{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "dependencies": map[string]any{}}}}, CodeInvalidTool, "", ""},
		{"collision", []*mcp.Tool{{Name: "get_sum", InputSchema: obj}, {Name: "getSum", InputSchema: obj}}, CodeToolCollision, "", ""},
		{"unmappable name", []*mcp.Tool{{Name: "___", InputSchema: obj}}, CodeInvalidTool, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := translate("p", tc.tools)
			var re *fault.Error
			if tc.code != "" {
				if !errors.As(err, &re) || re.Code != tc.code {
					t.Fatalf("err %v, want %s", err, tc.code)
				}
				return
			}
			if err != nil || len(got) != 1 {
				t.Fatalf("translate: %v %v", got, err)
			}
			m := got[0].Contribution.Manifest
			if m.RiskTier != tc.risk || m.EffectClass != tc.eff {
				t.Fatalf("risk/effect %s/%s, want %s/%s", m.RiskTier, m.EffectClass, tc.risk, tc.eff)
			}
		})
	}
}

func TestPinCoversNameDescriptionAndSchema(t *testing.T) {
	base := &mcp.Tool{Name: "a", Description: "d", InputSchema: map[string]any{"type": "object"}}
	p0, _ := Pin(base)
	for _, changed := range []*mcp.Tool{
		{Name: "b", Description: "d", InputSchema: base.InputSchema},
		{Name: "a", Description: "e", InputSchema: base.InputSchema},
		{Name: "a", Description: "d", InputSchema: map[string]any{"type": "object", "required": []any{"x"}}},
	} {
		if p, _ := Pin(changed); p == p0 {
			t.Errorf("pin of %+v equals the original's", changed)
		}
	}
	same := &mcp.Tool{Name: "a", Description: "d", Title: "other title", InputSchema: map[string]any{"type": "object"}}
	if p, _ := Pin(same); p != p0 {
		t.Error("a title change moved the pin")
	}
}

// echoServer is a real go-sdk MCP server over streamable HTTP on loopback.
func echoServer(b testing.TB) store.MCPServer {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
		s := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
		s.AddTool(&mcp.Tool{Name: "echo", InputSchema: map[string]any{"type": "object"}}, func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(r.Params.Arguments)}}}, nil
		})
		return s
	}, nil)
	ts := httptest.NewServer(h)
	b.Cleanup(ts.Close)
	return store.MCPServer{ProviderID: "bench", Transport: TransportHTTP, URL: ts.URL, TimeoutMs: 5000, Generation: 1}
}

// BenchmarkToolsCall: tools/call through the runner with the pooled session, and with a
// session opened per call (initialize + call + close), to size the pool's worth.
func BenchmarkToolsCall(b *testing.B) {
	srv := echoServer(b)
	d := newDialer(nil, nil)
	call := kernel.Call{Ref: "bench:echo@1", Input: json.RawMessage(`{"message":"hi"}`)}
	ctx := context.Background()
	b.Run("pooled", func(b *testing.B) {
		p := &pool{d: d, by: map[string]*pooled{}}
		defer p.close()
		r := toolRunner{pool: p, srv: srv, name: "echo"}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.Run(ctx, call); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("connect-per-call", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p := &pool{d: d, by: map[string]*pooled{}}
			if _, err := (toolRunner{pool: p, srv: srv, name: "echo"}).Run(ctx, call); err != nil {
				b.Fatal(err)
			}
			p.close()
		}
	})
}
