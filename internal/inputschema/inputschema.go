// Package inputschema compiles a capability's declared input schema (JSON
// Schema draft 2020-12) into a strict validator for invocation input: the
// schema is closed against unknown properties at every depth, string formats
// are asserted, nothing is coerced, and every violation is reported with an
// RFC 6901 pointer into the input.
//
// Closing: every object-typed schema that applies to a value of its own (the
// root, properties, items, ...) and declares neither additionalProperties nor
// unevaluatedProperties gets "unevaluatedProperties": false. An author who
// wants an open object says so with "additionalProperties": true. See
// close.go for why compositions (allOf, $ref) keep working.
//
// The validator is santhosh-tekuri/jsonschema/v6: it passes every required
// draft 2020-12 test of the official JSON-Schema-Test-Suite, 1245 of 1245 in
// the vendored copy (TestJSONSchemaTestSuiteDraft2020), and fails closed on an
// unresolved $ref.
package inputschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Draft2020 is the only dialect accepted for input schemas: closing relies on
// unevaluatedProperties, which older drafts would silently ignore.
const Draft2020 = "https://json-schema.org/draft/2020-12/schema"

// schemaURL is where the compiled schema lives for reference resolution: a
// relative $ref resolves under it, and nothing under it can be loaded.
const schemaURL = "xema:///input-schema.json"

// ErrRemoteRef is the cause of a compile error for a $ref that does not
// resolve inside the schema: no schema is ever fetched, so it fails closed.
var ErrRemoteRef = errors.New("references outside the schema are not loaded")

// CompileError says why the input schema of a capability cannot be published.
type CompileError struct {
	Ref string // the capability ref
	Err error
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("input schema of %s: %v", e.Ref, e.Err)
}

func (e *CompileError) Unwrap() error { return e.Err }

// Violation is one reason an input is rejected.
type Violation struct {
	// Path is an RFC 6901 JSON pointer into the input: "" is the input
	// itself, "/items/3/name" a nested value.
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Schema is a compiled, closed input schema. It is immutable and safe for
// concurrent use.
type Schema struct {
	sch *jsonschema.Schema
}

// Compile closes a copy of schema (see the package documentation) and
// compiles it with format assertion on and no loader: only the schema itself
// and the embedded JSON Schema metaschemas can be referenced. schema is not
// modified. Compile once per capability, when it is published.
func Compile(ref string, schema map[string]any) (*Schema, error) {
	return compile(ref, schema, true)
}

func compile(ref string, schema map[string]any, closed bool) (*Schema, error) {
	doc, err := normalize(schema)
	if err != nil {
		return nil, &CompileError{Ref: ref, Err: err}
	}
	if err := checkDialect(doc); err != nil {
		return nil, &CompileError{Ref: ref, Err: err}
	}
	if closed {
		closeSchema(doc)
	}

	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, &CompileError{Ref: ref, Err: err}
	}
	sch, err := c.Compile(schemaURL)
	var lerr *jsonschema.LoadURLError
	if errors.As(err, &lerr) && errors.Is(lerr.Err, ErrRemoteRef) {
		// LoadURLError does not unwrap: name the cause so callers can test it.
		return nil, &CompileError{Ref: ref, Err: fmt.Errorf("$ref %s: %w", lerr.URL, ErrRemoteRef)}
	}
	if err != nil {
		return nil, &CompileError{Ref: ref, Err: err}
	}
	return &Schema{sch: sch}, nil
}

// Validate checks input against the schema and returns every violation,
// sorted by path, or nil when the input is valid. Malformed JSON is one
// violation at "".
func (s *Schema) Validate(input json.RawMessage) []Violation {
	v, bad := decodeInput(input)
	if bad != nil {
		return []Violation{*bad}
	}
	err := s.sch.Validate(v)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return []Violation{{Path: "", Message: "invalid: " + err.Error()}}
	}
	return violations(verr)
}

// normalize deep-copies schema through JSON, so that the caller's map is
// never modified and Go values ([]string, int) become what the compiler
// reads ([]any, json.Number).
func normalize(schema map[string]any) (map[string]any, error) {
	if schema == nil {
		return nil, errors.New("no schema")
	}
	raw, err := json.Marshal(schema)
	if err != nil {
		return nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var doc map[string]any
	if err := d.Decode(&doc); err != nil {
		return nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	return doc, nil
}

// checkDialect rejects any $schema other than draft 2020-12, in s or any of
// its subschemas.
func checkDialect(node any) error {
	s, ok := node.(map[string]any)
	if !ok {
		return nil
	}
	if d, ok := s["$schema"]; ok {
		if str, _ := d.(string); strings.TrimSuffix(str, "#") != Draft2020 {
			return fmt.Errorf("$schema %v is not supported, only %s", d, Draft2020)
		}
	}
	var err error
	eachSubschema(s, func(sub any, _ position) {
		if err == nil {
			err = checkDialect(sub)
		}
	})
	return err
}

// refuseLoader is the compiler's only loader: every URL outside the schema
// (the embedded metaschemas are served before any loader) is refused.
type refuseLoader struct{}

func (refuseLoader) Load(string) (any, error) {
	return nil, ErrRemoteRef
}

// CompileOutput compiles a capability's declared output schema for checking what a provider
// answers: draft 2020-12 only, formats asserted, strict JSON decoding (no duplicate keys,
// bounded depth), no coercion and no remote $ref, exactly as for inputs. One difference: the
// schema is not closed. A provider adding a property is how APIs evolve, and an author who
// wants an output closed says so with additionalProperties or unevaluatedProperties, which is
// honoured. An absent or empty schema ({}) declares nothing and yields nil: the output is then
// not checked (a federated tool without an outputSchema, for instance).
func CompileOutput(ref string, schema map[string]any) (*Schema, error) {
	if len(schema) == 0 {
		return nil, nil
	}
	return compile(ref, schema, false)
}
