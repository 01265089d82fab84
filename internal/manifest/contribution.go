package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/xemahq/xema/internal/capref"
	"github.com/xemahq/xema/internal/strictjson"
)

// ParseContribution parses and validates one contribution file's bytes. The Contribution
// is the zero value unless problems is empty. file labels every Problem.
func ParseContribution(file string, data []byte) (Contribution, []Problem) {
	v, p := decodeJSON(file, data)
	if p != nil {
		return Contribution{}, []Problem{*p}
	}
	return checkContribution(file, "", v)
}

// ValidateContribution is ParseContribution for a contribution received as JSON (the
// ingestion API): the identical checks, the identical Contribution.
func ValidateContribution(file string, raw json.RawMessage) (Contribution, []Problem) {
	return ParseContribution(file, raw)
}

// checkContribution validates the decoded contribution v found at prefix in file.
func checkContribution(file, prefix string, v any) (Contribution, []Problem) {
	problems := validate(builtin().contribution, file, prefix, v)
	problems = append(problems, extraContributionChecks(file, prefix, v)...)
	if len(problems) > 0 {
		return Contribution{}, sortProblems(problems)
	}
	c, p := typed(file, prefix, v)
	if p != nil {
		return Contribution{}, []Problem{*p}
	}
	return c, nil
}

// typed decodes a contribution that passed every check into its Go type.
func typed(file, prefix string, v any) (Contribution, *Problem) {
	var c Contribution
	if top, ok := v.(map[string]any); ok {
		delete(top, "$schema") // for editors only (the schema allows it): not part of the contribution
	}
	if p := decodeInto(file, prefix, v, &c); p != nil {
		return Contribution{}, p
	}
	c.Source, c.SourcePath = file, prefix
	return c, nil
}

// extraContributionChecks are the rules JSON Schema cannot express: the I/O schemas must
// compile, and refs must be canonical. They run on whatever parts are well-formed so one
// pass lists every problem.
func extraContributionChecks(file, prefix string, v any) []Problem {
	top, _ := v.(map[string]any)
	m, _ := top["manifest"].(map[string]any)
	if m == nil {
		return nil
	}
	mp := strictjson.Pointer(prefix, "manifest")
	var out []Problem
	for _, name := range []string{"inputSchema", "outputSchema"} {
		if doc, ok := m[name].(map[string]any); ok {
			out = append(out, schemaProblems(file, strictjson.Pointer(mp, name), doc)...)
		}
	}
	if doc, ok := m["inputSchema"].(map[string]any); ok {
		out = append(out, resourceProblems(file, strictjson.Pointer(mp, "inputSchema"), doc)...)
	}
	out = append(out, refProblem(file, strictjson.Pointer(mp, "ref"), m["ref"])...)
	if bindings, ok := m["requiredBindings"].([]any); ok {
		for i, b := range bindings {
			if bm, ok := b.(map[string]any); ok {
				out = append(out, refProblem(file, strictjson.Pointer(mp, "requiredBindings", fmt.Sprint(i), "remedyCapabilityRef"), bm["remedyCapabilityRef"])...)
			}
		}
	}
	return out
}

// ResourceAnnotation marks the top-level input property whose value names the resource a
// call acts on: the string a grant's resource globs are matched against.
const ResourceAnnotation = "x-xema-resource"

// resourceProblems refuses a resource annotation that would bind nothing: one that is not
// true, on a property whose type is not exactly "string" (a number or a union would never
// be matched against a grant's globs), or on more than one property.
func resourceProblems(file, path string, schema map[string]any) []Problem {
	props, _ := schema["properties"].(map[string]any)
	var out []Problem
	var marked []string
	for name, p := range props {
		ps, ok := p.(map[string]any)
		if !ok {
			continue
		}
		v, ok := ps[ResourceAnnotation]
		if !ok {
			continue
		}
		at := strictjson.Pointer(path, "properties", name)
		switch {
		case v != true:
			out = append(out, Problem{File: file, Path: strictjson.Pointer(at, ResourceAnnotation), Message: ResourceAnnotation + " must be true"})
		case ps["type"] != "string":
			out = append(out, Problem{File: file, Path: strictjson.Pointer(at, "type"),
				Message: "a property marked " + ResourceAnnotation + " must have type \"string\": grants match resources as strings"})
		default:
			marked = append(marked, name)
		}
	}
	if len(marked) > 1 {
		slices.Sort(marked)
		out = append(out, Problem{File: file, Path: strictjson.Pointer(path, "properties", marked[1], ResourceAnnotation),
			Message: "only one property may be marked " + ResourceAnnotation + " (also " + marked[0] + ")"})
	}
	return out
}

// ResourceProperty is the top-level input property marked with ResourceAnnotation, or "".
func ResourceProperty(schema map[string]any) string {
	props, _ := schema["properties"].(map[string]any)
	for name, p := range props {
		if ps, ok := p.(map[string]any); ok && ps[ResourceAnnotation] == true {
			return name
		}
	}
	return ""
}

// refProblem reports a ref that passes the schema's pattern but not capref.Parse (a major
// with leading zeros or out of range); pattern failures are the schema's to report.
func refProblem(file, path string, v any) []Problem {
	s, ok := v.(string)
	if !ok || !refPattern.MatchString(s) {
		return nil
	}
	if _, err := capref.Parse(s); err != nil {
		_, why, _ := strings.Cut(err.Error(), ": ")
		return []Problem{{File: file, Path: path, Message: why}}
	}
	return nil
}

// CompileSchema compiles a capability's inputSchema or outputSchema the way the linter
// checks it: draft 2020-12 only, validated against the meta-schema, every $ref resolved
// inside the document (no network, no files), formats asserted. The gateway uses it to
// validate call input with exactly the schema the linter accepted.
func CompileSchema(doc map[string]any) (*jsonschema.Schema, error) {
	if s, ok := doc["$schema"]; ok {
		if s, _ := s.(string); strings.TrimSuffix(s, "#") != strings.TrimSuffix(jsonschema.Draft2020.String(), "#") {
			return nil, fmt.Errorf("$schema must be %s (draft 2020-12)", jsonschema.Draft2020)
		}
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(offlineLoader{})
	c.AssertFormat()
	if err := c.AddResource(schemaBase, doc); err != nil {
		return nil, fmt.Errorf("add schema: %w", err)
	}
	sch, err := c.Compile(schemaBase)
	if err != nil {
		return nil, fmt.Errorf("compile schema: %w", err)
	}
	return sch, nil
}

// schemaBase is the URL an I/O schema is compiled under; .invalid never resolves, so a
// relative $ref to another document fails instead of reaching anything.
const schemaBase = "https://capability.xema.invalid/schema.json"

// schemaProblems reports why doc, found at path in file, is not a usable JSON Schema.
func schemaProblems(file, path string, doc map[string]any) []Problem {
	_, err := CompileSchema(doc)
	if err == nil {
		return nil
	}
	var sve *jsonschema.SchemaValidationError
	if errors.As(err, &sve) {
		var ve *jsonschema.ValidationError
		if errors.As(sve.Err, &ve) {
			ps := leafProblems(ve, file, path, nil)
			for i := range ps {
				ps[i].Message = "invalid JSON Schema: " + ps[i].Message
			}
			return ps
		}
	}
	var lue *jsonschema.LoadURLError
	var pnf *jsonschema.JSONPointerNotFoundError
	var anf *jsonschema.AnchorNotFoundError
	switch {
	case errors.As(err, &lue):
		return []Problem{{File: file, Path: path, Message: "unresolvable $ref " + relative(lue.URL) + ": " + errOffline.Error()}}
	case errors.As(err, &pnf):
		return []Problem{{File: file, Path: path, Message: "unresolvable $ref " + relative(pnf.URL) + ": no such location in the schema"}}
	case errors.As(err, &anf):
		return []Problem{{File: file, Path: path, Message: "unresolvable $ref " + relative(anf.Reference) + ": no such anchor in the schema"}}
	}
	return []Problem{{File: file, Path: path, Message: "invalid JSON Schema: " + relative(err.Error())}}
}

// relative strips the internal base URL from a message, leaving what the author wrote.
func relative(s string) string {
	return strings.ReplaceAll(s, schemaBase, "")
}

// decodeInto turns the validated value v into a typed struct. The schema has already
// rejected unknown fields and wrong types; this only catches what Go's types are narrower
// about (an integer written as 1.0).
func decodeInto(file, prefix string, v any, dst any) *Problem {
	data, err := json.Marshal(v)
	if err != nil {
		return &Problem{File: file, Path: prefix, Message: "re-encode: " + err.Error()}
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	d.DisallowUnknownFields()
	if err := d.Decode(dst); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			path := prefix
			if ute.Field != "" {
				path = strictjson.Pointer(prefix, strings.Split(ute.Field, ".")...)
			}
			return &Problem{File: file, Path: path, Message: "must be " + typeNames([]string{goTypeName(ute.Type.Kind().String())}) + ", got " + ute.Value}
		}
		return &Problem{File: file, Path: prefix, Message: err.Error()}
	}
	return nil
}

func goTypeName(k string) string {
	switch {
	case strings.HasPrefix(k, "int"), strings.HasPrefix(k, "uint"):
		return "integer"
	case strings.HasPrefix(k, "float"):
		return "number"
	case k == "bool":
		return "boolean"
	case k == "slice":
		return "array"
	case k == "map", k == "struct":
		return "object"
	}
	return k
}

var refPattern = regexp.MustCompile(capref.Pattern)
