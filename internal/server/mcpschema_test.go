package server

import (
	"encoding/json"
	"testing"

	"github.com/xemahq/xema/internal/metatool"
)

// TestMetaToolSchemaLimits: the MCP meta-tools' input schemas are JSON and declare the
// gateway's own limits (meta.go), not copies of them.
func TestMetaToolSchemaLimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		schema json.RawMessage
		prop   string
		key    string
		want   int
	}{
		{"search", searchSchema, "limit", "maximum", metatool.MaxSearchLimit},
		{"describe", describeSchema, "refs", "maxItems", metatool.MaxDescribeRefs},
		{"plan", planSchema, "maxDepth", "maximum", metatool.MaxPlanDepth},
	} {
		var s struct {
			Properties map[string]map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(tc.schema, &s); err != nil {
			t.Fatalf("%s schema: %v", tc.name, err)
		}
		if got, _ := s.Properties[tc.prop][tc.key].(float64); int(got) != tc.want {
			t.Errorf("%s schema: %s.%s = %v, want %d", tc.name, tc.prop, tc.key, s.Properties[tc.prop][tc.key], tc.want)
		}
	}
	for name, raw := range map[string]json.RawMessage{"invoke": invokeSchema, "preflight": preflightSchema, "explain": explainSchema} {
		if !json.Valid(raw) {
			t.Errorf("%s schema is not JSON", name)
		}
	}
}
