package inputschema

import (
	"encoding/json"
	"testing"
)

func TestCompileOutput(t *testing.T) {
	total := `{"type": "object", "required": ["total"], "properties": {
		"total": {"type": "integer"}, "at": {"type": "string", "format": "date-time"},
		"closed": {"type": "object", "additionalProperties": false, "properties": {"a": {"type": "string"}}}}}`
	cases := []struct {
		name   string
		schema string
		output string
		paths  []string // nil: valid
	}{
		{"valid", total, `{"total": 3}`, nil},
		{"undeclared property passes (not closed)", total, `{"total": 3, "extra": true}`, nil},
		{"wrong type names the path", total, `{"total": "not-a-number"}`, []string{"/total"}},
		{"no coercion of a numeric string", total, `{"total": "3"}`, []string{"/total"}},
		{"missing required", total, `{}`, []string{""}},
		{"format asserted", total, `{"total": 1, "at": "yesterday"}`, []string{"/at"}},
		{"author's closing honoured", total, `{"total": 1, "closed": {"a": "x", "b": 1}}`, []string{"/closed/b"}},
		{"duplicate key refused", total, `{"total": 1, "total": 2}`, []string{"/total"}},
		{"not JSON", total, `<html>`, []string{""}},
		{"array output", `{"type": "array", "items": {"type": "integer"}}`, `[1, "x"]`, []string{"/1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := CompileOutput("test:cap.do@1", schemaJSON(t, c.schema))
			if err != nil || s == nil {
				t.Fatalf("CompileOutput: %v, %v", s, err)
			}
			v := s.Validate(json.RawMessage(c.output))
			var got []string
			for _, x := range v {
				got = append(got, x.Path)
			}
			if len(got) != len(c.paths) {
				t.Fatalf("violations %+v, want paths %q", v, c.paths)
			}
			for i := range got {
				if got[i] != c.paths[i] {
					t.Errorf("violation %d at %q, want %q (%+v)", i, got[i], c.paths[i], v)
				}
			}
		})
	}
}

func TestCompileOutputUndeclared(t *testing.T) {
	for _, schema := range []map[string]any{nil, {}} {
		s, err := CompileOutput("test:cap.do@1", schema)
		if s != nil || err != nil {
			t.Errorf("CompileOutput(%v) = %v, %v; want nil, nil (nothing to check)", schema, s, err)
		}
	}
	if _, err := CompileOutput("test:cap.do@1", map[string]any{"$schema": "http://json-schema.org/draft-07/schema#"}); err == nil {
		t.Error("a draft-07 output schema compiled")
	}
	if _, err := CompileOutput("test:cap.do@1", map[string]any{"$ref": "https://example.com/s.json"}); err == nil {
		t.Error("a remote $ref compiled")
	}
}
