package gateway

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/inputschema"
)

func TestCheckOutput(t *testing.T) {
	schema, err := inputschema.CompileOutput("t:c@1", map[string]any{"type": "object",
		"properties": map[string]any{"total": map[string]any{"type": "integer"}}})
	if err != nil {
		t.Fatal(err)
	}
	checked := &catalog.Entry{Output: schema}
	cases := []struct {
		name  string
		entry *catalog.Entry
		kind  string
		out   string
		bad   bool
	}{
		{"http valid", checked, "http", `{"total": 1}`, false},
		{"http invalid", checked, "http", `{"total": "not-a-number"}`, true},
		{"connector invalid", checked, "connector", `{"total": 1.5}`, true},
		{"mcp-external invalid", checked, "mcp-external", `{"total": true}`, true},
		{"kernel not checked", checked, "kernel", `{"total": "x"}`, false},
		{"no output schema", &catalog.Entry{}, "http", `{"total": "x"}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := len(checkOutput(c.entry, c.kind, json.RawMessage(c.out))) > 0; got != c.bad {
				t.Errorf("checkOutput bad=%v, want %v", got, c.bad)
			}
		})
	}
}

func TestInvalidOutputAnswer(t *testing.T) {
	err := invalidOutput("t:c@1", []inputschema.Violation{{Path: "/total", Message: "got string, want integer"}})
	e := providerError(err)
	if e.Kind != fault.Provider || e.Code != CodeInvalidOutput {
		t.Fatalf("answer %v %s", e.Kind, e.Code)
	}
	if !strings.Contains(e.Message, "/total") || len(e.Violations) != 1 || e.Violations[0].Path != "/total" {
		t.Errorf("answer does not name the path: %+v", e)
	}
	var oe *outputError
	if !errors.As(err, &oe) {
		t.Error("not an outputError")
	}
}
