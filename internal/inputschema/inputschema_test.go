package inputschema

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// createPullRequest is the spec's connector:scm.create-pull-request@1 input.
func createPullRequest() map[string]any {
	return map[string]any{
		"type":     "object",
		"required": []string{"sourceBranch", "targetBranch", "title"},
		"properties": map[string]any{
			"sourceBranch": map[string]any{"type": "string", "minLength": 1},
			"targetBranch": map[string]any{"type": "string", "minLength": 1},
			"title":        map[string]any{"type": "string", "minLength": 1, "maxLength": 256},
			"description":  map[string]any{"type": "string"},
		},
	}
}

// schemaJSON decodes a schema written as JSON, as a manifest carries it.
func schemaJSON(t testing.TB, s string) map[string]any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("test schema: %v", err)
	}
	return m
}

func mustCompile(t testing.TB, schema map[string]any) *Schema {
	t.Helper()
	s, err := Compile("test:cap.do@1", schema)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return s
}

func TestValidate(t *testing.T) {
	nested := `{
		"type": "object",
		"properties": {
			"owner": {"type": "object", "properties": {"email": {"type": "string", "format": "email"}}},
			"items": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}},
			"meta": {"type": "object"},
			"open": {"type": "object", "additionalProperties": true},
			"status": {"enum": ["open", "closed"]},
			"count": {"type": "integer"},
			"at": {"type": "string", "format": "date-time"},
			"id": {"type": "string", "format": "uuid"},
			"link": {"type": "string", "format": "uri"}
		}
	}`
	tests := []struct {
		name   string
		schema string
		input  string
		want   []Violation
	}{
		{"valid", "", `{"sourceBranch": "feature/x", "targetBranch": "main", "title": "Add user authentication"}`, nil},
		{"optional property", "", `{"sourceBranch": "a", "targetBranch": "b", "title": "c", "description": "d"}`, nil},
		{"missing required", "", `{"sourceBranch": "feature/x", "targetBranch": "main"}`,
			[]Violation{{"", "missing required property title"}}},
		{"unknown property", "", `{"sourceBranch": "a", "targetBranch": "b", "title": "c", "reviewer": "x"}`,
			[]Violation{{"/reviewer", "unknown property reviewer"}}},
		{"no coercion of numbers to strings", "", `{"sourceBranch": 1, "targetBranch": "b", "title": "c"}`,
			[]Violation{{"/sourceBranch", "must be a string, got number"}}},
		{"every violation, sorted by path", "", `{"sourceBranch": "", "title": true, "x~y/z": null}`,
			[]Violation{
				{"", "missing required property targetBranch"},
				{"/sourceBranch", "must be at least 1 characters long"},
				{"/title", "must be a string, got boolean"},
				{"/x~0y~1z", "unknown property x~y/z"},
			}},
		{"not an object", "", `["a"]`, []Violation{{"", "must be an object, got array"}}},
		{"malformed JSON", "", `{"sourceBranch": `, []Violation{{"", "malformed JSON: unexpected end of input"}}},
		{"empty input", "", ``, []Violation{{"", "malformed JSON: unexpected end of input"}}},
		{"trailing data", "", `{} {}`, []Violation{{"", "malformed JSON: unexpected data after the top-level value"}}},
		{"invalid UTF-8", "", "{\"title\": \"\xff\"}", []Violation{{"", "malformed JSON: not valid UTF-8"}}},
		{"duplicate property", "", `{"sourceBranch": "a", "targetBranch": "b", "title": "c", "title": "d"}`,
			[]Violation{{"/title", "duplicate property title"}}},
		{"duplicate property at depth", nested, `{"items": [{"name": "a"}, {"name": "a", "name": "b"}]}`,
			[]Violation{{"/items/1/name", "duplicate property name"}}},
		{"same name in different objects is no duplicate", nested, `{"items": [{"name": "a"}, {"name": "a"}], "owner": {}}`, nil},
		{"colon inside strings is not a property", nested, `{"items": [{"name": "a:b\\\":c"}]}`, nil},
		{"nested too deep", nested, strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
			[]Violation{{strings.Repeat("/0", maxDepth), fmt.Sprintf("nested deeper than %d levels", maxDepth)}}},
		{"string is not an integer", nested, `{"count": "1"}`, []Violation{{"/count", "must be an integer, got string"}}},
		{"fractional is not an integer", nested, `{"count": 1.5}`, []Violation{{"/count", "must be an integer, got number"}}},
		{"1.0 is an integer", nested, `{"count": 1.0}`, nil},
		{"enum", nested, `{"status": "merged"}`, []Violation{{"/status", `must be one of "open", "closed"`}}},
		{"email format", nested, `{"owner": {"email": "not-an-email"}}`, []Violation{{"/owner/email", "must be a valid email"}}},
		{"date-time format", nested, `{"at": "2026-01-15 10:00"}`, []Violation{{"/at", "must be a valid date-time"}}},
		{"uuid format", nested, `{"id": "123"}`, []Violation{{"/id", "must be a valid uuid"}}},
		{"uri format", nested, `{"link": "no scheme"}`, []Violation{{"/link", "must be a valid uri"}}},
		{"formats accepted", nested, `{"owner": {"email": "a@example.com"}, "at": "2026-01-15T10:00:00Z", "id": "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "link": "https://example.com/x"}`, nil},
		{"unknown property at depth", nested, `{"owner": {"email": "a@example.com", "phone": "1"}}`,
			[]Violation{{"/owner/phone", "unknown property phone"}}},
		{"open object closed by the gateway", nested, `{"meta": {"anything": 1}}`,
			[]Violation{{"/meta/anything", "unknown property anything"}}},
		{"explicitly open object stays open", nested, `{"open": {"anything": 1}}`, nil},
		{"pointers into arrays", nested, `{"items": [{"name": "a"}, {}, {"name": 2, "extra": 1}]}`,
			[]Violation{
				{"/items/1", "missing required property name"},
				{"/items/2/extra", "unknown property extra"},
				{"/items/2/name", "must be a string, got number"},
			}},
		{"array indexes sorted numerically", nested, `{"items": [{},{},{},{},{},{},{},{},{},{},{}, {}]}`,
			func() []Violation {
				var vs []Violation
				for i := range 12 {
					vs = append(vs, Violation{fmt.Sprintf("/items/%d", i), "missing required property name"})
				}
				return vs
			}()},
		{"empty schema takes no properties", `{}`, `{"a": 1}`, []Violation{{"/a", "unknown property a"}}},
		{"empty schema takes the empty object", `{}`, `{}`, nil},
		{"empty enum validates nothing", `{"properties": {"a": {"enum": []}}}`, `{"a": "x"}`,
			[]Violation{{"/a", "no value is allowed (empty enum)"}}},
		{"big integers stay exact", `{"properties": {"n": {"type": "integer", "maximum": 9007199254740992}}}`,
			`{"n": 9007199254740993}`, []Violation{{"/n", "must be <= 9007199254740992"}}},
		{"anyOf type mismatches merged", `{"properties": {"v": {"anyOf": [{"type": "string"}, {"type": ["integer", "null"]}]}}}`,
			`{"v": true}`, []Violation{{"/v", "must be an integer or null or a string, got boolean"}}},
		{"const", `{"properties": {"v": {"const": 2}}}`, `{"v": 3}`, []Violation{{"/v", "must be 2"}}},
		{"explicit additionalProperties false", `{"properties": {"a": {}}, "additionalProperties": false}`, `{"a": 1, "b": 2, "c": 3}`,
			[]Violation{{"/b", "unknown property b"}, {"/c", "unknown property c"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			schema := createPullRequest()
			if tt.schema != "" {
				schema = schemaJSON(t, tt.schema)
			}
			got := mustCompile(t, schema).Validate(json.RawMessage(tt.input))
			if !slices.Equal(got, tt.want) {
				t.Errorf("Validate(%s)\n got %q\nwant %q", tt.input, got, tt.want)
			}
		})
	}
}

// TestCompositionAfterClosing checks that closing keeps allOf and $ref
// compositions working: the properties of every branch are known together,
// and anything else is still rejected.
func TestCompositionAfterClosing(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		input  string
		want   []Violation
	}{
		{"allOf merges branches", `{"allOf": [
				{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
				{"properties": {"b": {"type": "integer"}}}]}`,
			`{"a": "x", "b": 1}`, nil},
		{"allOf still closed", `{"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}`,
			`{"a": 1, "b": 2, "c": 3}`, []Violation{{"/c", "unknown property c"}}},
		{"$ref to a definition", `{"$ref": "#/$defs/base", "properties": {"extra": {"type": "boolean"}},
				"$defs": {"base": {"type": "object", "properties": {"a": {"type": "string"}}}}}`,
			`{"a": "x", "extra": true}`, nil},
		{"$ref still closed", `{"$ref": "#/$defs/base", "$defs": {"base": {"properties": {"a": {}}}}}`,
			`{"a": 1, "z": 2}`, []Violation{{"/z", "unknown property z"}}},
		{"nested $ref at a property", `{"properties": {"addr": {"$ref": "#/$defs/addr"}},
				"$defs": {"addr": {"allOf": [{"properties": {"city": {"type": "string"}}}, {"properties": {"zip": {"type": "string"}}}]}}}`,
			`{"addr": {"city": "x", "zip": "1", "planet": "earth"}}`, []Violation{{"/addr/planet", "unknown property planet"}}},
		{"a failing branch property is not also unknown", `{"allOf": [{"properties": {"a": {"type": "string"}}}]}`,
			`{"a": 1}`, []Violation{{"/a", "must be a string, got number"}}},
		{"oneOf with branch-local properties", `{"oneOf": [
				{"properties": {"kind": {"const": "a"}, "x": {"type": "string"}}, "required": ["kind"]},
				{"properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind"]}]}`,
			`{"kind": "b", "y": "v"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustCompile(t, schemaJSON(t, tt.schema)).Validate(json.RawMessage(tt.input))
			if !slices.Equal(got, tt.want) {
				t.Errorf("Validate(%s)\n got %q\nwant %q", tt.input, got, tt.want)
			}
		})
	}
}

func TestCompileFailsClosed(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		isRef  bool
	}{
		{"unresolved local $ref", `{"properties": {"a": {"$ref": "#/$defs/missing"}}}`, false},
		{"remote $ref", `{"properties": {"a": {"$ref": "https://example.com/schema.json"}}}`, true},
		{"relative $ref to another document", `{"$ref": "other.json"}`, true},
		{"file $ref", `{"$ref": "file:///etc/passwd"}`, true},
		{"older draft", `{"$schema": "http://json-schema.org/draft-07/schema#"}`, false},
		{"nested older draft", `{"properties": {"a": {"$schema": "http://json-schema.org/draft-04/schema#"}}}`, false},
		{"invalid against the metaschema", `{"type": "objekt"}`, false},
		{"invalid regexp", `{"properties": {"a": {"type": "string", "pattern": "("}}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Compile("test:cap.do@1", schemaJSON(t, tt.schema))
			if err == nil {
				t.Fatalf("Compile succeeded, want an error; {} validates: %v", s.Validate(json.RawMessage(`{}`)))
			}
			var cerr *CompileError
			if !errors.As(err, &cerr) || cerr.Ref != "test:cap.do@1" {
				t.Errorf("error %v is not a *CompileError for the ref", err)
			}
			if got := errors.Is(err, ErrRemoteRef); got != tt.isRef {
				t.Errorf("errors.Is(ErrRemoteRef) = %v, want %v: %v", got, tt.isRef, err)
			}
		})
	}
}

func TestCompileDoesNotModifyTheSchema(t *testing.T) {
	schema := createPullRequest()
	before, _ := json.Marshal(schema)
	mustCompile(t, schema)
	after, _ := json.Marshal(schema)
	if string(before) != string(after) {
		t.Errorf("schema modified:\n%s\n%s", before, after)
	}
}

func TestCloseSchema(t *testing.T) {
	doc := schemaJSON(t, `{
		"properties": {
			"typed": {"type": ["object", "null"]},
			"str": {"type": "string"},
			"any": {},
			"declared": {"type": "object", "additionalProperties": {"type": "string"}},
			"composed": {"anyOf": [{"type": "string"}, {"properties": {"a": {}}}]}
		},
		"not": {"properties": {"n": {"type": "object"}}},
		"$defs": {"d": {"type": "object"}}
	}`)
	closeSchema(doc)
	props := asMap(doc["properties"])
	for name, wantClosed := range map[string]bool{"typed": true, "str": false, "any": false, "declared": false, "composed": true} {
		_, closed := asMap(props[name])["unevaluatedProperties"]
		if closed != wantClosed {
			t.Errorf("properties/%s closed = %v, want %v", name, closed, wantClosed)
		}
	}
	checks := map[string]map[string]any{
		"root":                   doc,
		"anyOf branch":           asMap(asList(asMap(props["composed"])["anyOf"])[1]),
		"$defs entry":            asMap(asMap(doc["$defs"])["d"]),
		"inside not":             asMap(asMap(asMap(doc["not"])["properties"])["n"]),
		"anyOf branch's objects": asMap(asMap(asMap(asList(asMap(props["composed"])["anyOf"])[1])["properties"])["a"]),
	}
	for name, wantClosed := range map[string]bool{"root": true, "anyOf branch": false, "$defs entry": false, "inside not": false, "anyOf branch's objects": false} {
		_, closed := checks[name]["unevaluatedProperties"]
		if closed != wantClosed {
			t.Errorf("%s closed = %v, want %v", name, closed, wantClosed)
		}
	}
}

func TestValidateConcurrent(t *testing.T) {
	s := mustCompile(t, createPullRequest())
	inputs := []struct {
		input string
		n     int
	}{
		{`{"sourceBranch": "a", "targetBranch": "b", "title": "c"}`, 0},
		{`{"sourceBranch": 1, "x": 2}`, 4},
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 200 {
				in := inputs[g%2]
				if got := s.Validate(json.RawMessage(in.input)); len(got) != in.n {
					t.Errorf("Validate(%s) = %v, want %d violations", in.input, got, in.n)
					return
				}
			}
		})
	}
	wg.Wait()
}
