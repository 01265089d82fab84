package manifest

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

const validFile = "testdata/valid/contributions/open-pr.capability.contribution.json"

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// minimal holds only the required fields.
const minimal = `{"kind": "capability", "manifest": {"ref": "artifact:read@1", "title": "t", "summary": "s",
 "sideEffects": "none", "inputSchema": {}, "outputSchema": {}, "riskTier": "low", "requiresApproval": false}}`

func objects(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{}
	}
	return out
}

func bindings(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"roleKey": map[string]any{"resourceKind": "repo", "role": "admin"}, "ownerKind": "org"}
	}
	return out
}

func TestValidContributions(t *testing.T) {
	full := readTestdata(t, validFile)
	tests := []struct {
		name  string
		base  []byte
		edits []edit
	}{
		{"every field", full, nil},
		{"required fields only", []byte(minimal), nil},
		{"no invocation", full, []edit{del("/invocation")}},
		{"title of exactly 200", full, []edit{set("/manifest/title", strings.Repeat("a", 200))}},
		{"summary of exactly 1000 runes", full, []edit{set("/manifest/summary", strings.Repeat("é", 1000))}},
		{"sideEffects of exactly 1000", full, []edit{set("/manifest/sideEffects", strings.Repeat("a", 1000))}},
		{"externalServiceRef of exactly 200", full, []edit{set("/manifest/externalServiceRef", strings.Repeat("a", 200))}},
		{"defaultCredentialBindingRef of exactly 200", full, []edit{set("/manifest/defaultCredentialBindingRef", strings.Repeat("a", 200))}},
		{"20 examples", full, []edit{set("/manifest/examples", objects(20))}},
		{"20 required bindings", full, []edit{set("/manifest/requiredBindings", bindings(20))}},
		{"role slug of 63", full, []edit{set("/manifest/requiredBindings/0/roleKey/role", "a"+strings.Repeat("b", 62))}},
		{"humanBaseline explicit-only", full, []edit{set("/manifest/humanBaseline", map[string]any{"kind": "explicit-only"})}},
		{"humanBaseline org-administrators", full, []edit{set("/manifest/humanBaseline", map[string]any{"kind": "org-administrators", "environments": []any{"org"}})}},
		{"humanBaseline empty environments", full, []edit{set("/manifest/humanBaseline/environments", []any{})}},
		{"timeoutMs 1", full, []edit{set("/invocation/timeoutMs", 1)}},
		{"timeoutMs 120000", full, []edit{set("/invocation/timeoutMs", 120000)}},
		{"http url", full, []edit{set("/invocation/url", "http://localhost:8080/x")}},
		{"ref without dot", full, []edit{set("/manifest/ref", "mcp-tool:invoke@1")}},
		{"remote-looking $id with local refs", full, []edit{set("/manifest/outputSchema", map[string]any{
			"$id": "https://example.com/out.json", "$ref": "#/$defs/a", "$defs": map[string]any{"a": map[string]any{"type": "object"}}})}},
		{"schema with anchor", full, []edit{set("/manifest/outputSchema", map[string]any{
			"$ref": "#a", "$defs": map[string]any{"a": map[string]any{"$anchor": "a", "type": "object"}}})}},
		{"boolean-free schema keywords", full, []edit{set("/manifest/inputSchema", map[string]any{"not": map[string]any{"type": "null"}})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := tt.base
			if tt.edits != nil {
				data = apply(t, tt.base, tt.edits...)
			}
			c, problems := ParseContribution("c.json", data)
			if len(problems) > 0 {
				t.Fatalf("problems for a valid contribution: %v", problems)
			}
			if c.Kind != "capability" || c.Manifest.Ref == "" || c.Source != "c.json" || c.SourcePath != "" {
				t.Fatalf("contribution not decoded: %+v", c)
			}
		})
	}
}

func TestFullContributionDecodes(t *testing.T) {
	c, problems := ParseContribution("c.json", readTestdata(t, validFile))
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	m := c.Manifest
	if m.RiskTier != "medium" || !m.RequiresApproval || m.HumanBaseline.MinimumOrgRole != "org_admin" ||
		m.InstanceGrade.ResourceType != "scm_repository" || m.RequiredBindings[0].RoleKey.Qualifier != "default-branch" ||
		m.TrustedContextProjection.SchemaVersion != 1 || *m.Delegable != true || *m.SafeForAgents != true ||
		c.Invocation.TimeoutMs != 15000 || c.Invocation.URL != "https://scm-bridge.internal:8443/pull-requests" ||
		!reflect.DeepEqual(m.HumanBaseline.Dimensions, map[string][]string{"team": {"platform"}}) {
		t.Fatalf("decoded manifest lost fields: %+v", c)
	}
	if _, ok := m.InputSchema["properties"].(map[string]any)["title"].(map[string]any)["maxLength"].(json.Number); !ok {
		t.Fatalf("numbers in inputSchema are not json.Number: %#v", m.InputSchema["properties"])
	}
}

// TestContributionFieldRules breaks one rule of schemas/contribution.schema.json (or of
// the invocation envelope) per case, starting from a contribution that sets every field,
// and checks the one Problem names the offending value and says what is wrong.
func TestContributionFieldRules(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	tests := []struct {
		name string
		edit edit
		path string
		msg  string
	}{
		// envelope
		{"kind wrong", set("/kind", "tool"), "/kind", "must be capability"},
		{"kind missing", del("/kind"), "", "missing required field kind"},
		{"manifest missing", del("/manifest"), "", "missing required field manifest"},
		{"manifest not an object", set("/manifest", "x"), "/manifest", "must be an object, got string"},
		{"unknown top-level field", set("/biome", map[string]any{"id": "x"}), "/biome", "unknown field biome"},
		{"top-level not an object", set("", []any{}), "", "must be an object, got array"},
		// manifest: required
		{"ref missing", del("/manifest/ref"), "/manifest", "missing required field ref"},
		{"title missing", del("/manifest/title"), "/manifest", "missing required field title"},
		{"summary missing", del("/manifest/summary"), "/manifest", "missing required field summary"},
		{"sideEffects missing", del("/manifest/sideEffects"), "/manifest", "missing required field sideEffects"},
		{"inputSchema missing", del("/manifest/inputSchema"), "/manifest", "missing required field inputSchema"},
		{"outputSchema missing", del("/manifest/outputSchema"), "/manifest", "missing required field outputSchema"},
		{"riskTier missing", del("/manifest/riskTier"), "/manifest", "missing required field riskTier"},
		{"requiresApproval missing", del("/manifest/requiresApproval"), "/manifest", "missing required field requiresApproval"},
		// manifest: provenance and unknown fields
		{"biome provenance declared", set("/manifest/biome", map[string]any{"id": "x", "version": "1.0.0"}), "/manifest/biome", "provenance"},
		{"unknown manifest field", set("/manifest/replacedBy", "x:y@2"), "/manifest/replacedBy", "unknown field replacedBy"},
		// ref
		{"ref upper case", set("/manifest/ref", "Connector:scm.merge@1"), "/manifest/ref", "must be a capability ref"},
		{"ref no major", set("/manifest/ref", "connector:scm.merge"), "/manifest/ref", "must be a capability ref"},
		{"ref leading zero major", set("/manifest/ref", "connector:scm.merge@01"), "/manifest/ref", "leading zeros"},
		{"ref major overflows", set("/manifest/ref", "connector:scm.merge@99999999999999999999"), "/manifest/ref", "out of range"},
		{"ref not a string", set("/manifest/ref", 1), "/manifest/ref", "must be a string, got number"},
		// strings with limits
		{"title too long", set("/manifest/title", long(201)), "/manifest/title", "must be at most 200 characters, got 201"},
		{"title not a string", set("/manifest/title", true), "/manifest/title", "must be a string, got boolean"},
		{"summary too long", set("/manifest/summary", long(1001)), "/manifest/summary", "must be at most 1000 characters, got 1001"},
		{"sideEffects too long", set("/manifest/sideEffects", long(1001)), "/manifest/sideEffects", "must be at most 1000 characters, got 1001"},
		{"externalServiceRef too long", set("/manifest/externalServiceRef", long(201)), "/manifest/externalServiceRef", "must be at most 200 characters"},
		{"externalServiceRef not a string", set("/manifest/externalServiceRef", 3), "/manifest/externalServiceRef", "must be a string, got number"},
		{"defaultCredentialBindingRef too long", set("/manifest/defaultCredentialBindingRef", long(201)), "/manifest/defaultCredentialBindingRef", "must be at most 200 characters"},
		// inputSchema / outputSchema
		{"inputSchema not an object", set("/manifest/inputSchema", "object"), "/manifest/inputSchema", "must be an object, got string"},
		{"inputSchema an array", set("/manifest/inputSchema", []any{}), "/manifest/inputSchema", "must be an object, got array"},
		{"inputSchema bad type keyword", set("/manifest/inputSchema/type", "strin"), "/manifest/inputSchema/type", "invalid JSON Schema"},
		{"inputSchema bad nested keyword", set("/manifest/inputSchema/properties/head/minLength", -1), "/manifest/inputSchema/properties/head/minLength", "invalid JSON Schema"},
		{"inputSchema unresolvable local $ref", set("/manifest/inputSchema/properties/repo/$ref", "#/$defs/nope"), "/manifest/inputSchema", "unresolvable $ref #/$defs/nope"},
		{"inputSchema remote $ref", set("/manifest/inputSchema/properties/repo/$ref", "https://example.com/repo.json"), "/manifest/inputSchema", "unresolvable $ref https://example.com/repo.json"},
		{"inputSchema file $ref", set("/manifest/inputSchema/properties/repo/$ref", "file:///etc/passwd"), "/manifest/inputSchema", "unresolvable $ref file:///etc/passwd"},
		{"inputSchema relative $ref", set("/manifest/inputSchema/properties/repo/$ref", "repo.json"), "/manifest/inputSchema", "unresolvable $ref"},
		{"inputSchema unknown anchor", set("/manifest/inputSchema/properties/repo/$ref", "#nope"), "/manifest/inputSchema", "unresolvable $ref #nope"},
		{"inputSchema other draft", set("/manifest/inputSchema/$schema", "http://json-schema.org/draft-07/schema#"), "/manifest/inputSchema", "$schema must be https://json-schema.org/draft/2020-12/schema"},
		{"inputSchema invalid regex", set("/manifest/inputSchema/properties/head/pattern", "(?<=a)b"), "/manifest/inputSchema/properties/head/pattern", "invalid JSON Schema: must be a valid regex"},
		{"outputSchema not an object", set("/manifest/outputSchema", 1), "/manifest/outputSchema", "must be an object, got number"},
		{"outputSchema invalid", set("/manifest/outputSchema/required", "url"), "/manifest/outputSchema/required", "invalid JSON Schema"},
		{"outputSchema unresolvable $ref", set("/manifest/outputSchema/$ref", "#/$defs/out"), "/manifest/outputSchema", "unresolvable $ref #/$defs/out"},
		// enums and booleans
		{"riskTier unknown", set("/manifest/riskTier", "extreme"), "/manifest/riskTier", "must be one of low, medium, high, critical"},
		{"riskTier wrong case", set("/manifest/riskTier", "Low"), "/manifest/riskTier", "must be one of low, medium, high, critical"},
		{"requiresApproval as string", set("/manifest/requiresApproval", "true"), "/manifest/requiresApproval", "must be a boolean, got string"},
		{"requiresApproval as number", set("/manifest/requiresApproval", 1), "/manifest/requiresApproval", "must be a boolean, got number"},
		{"outputClassification unknown", set("/manifest/outputClassification", "top-secret"), "/manifest/outputClassification", "must be one of public, internal, confidential, secret, regulated"},
		{"authorityEffect unknown", set("/manifest/authorityEffect", "shrinking"), "/manifest/authorityEffect", "must be one of none, expanding"},
		{"reach unknown", set("/manifest/reach", "world"), "/manifest/reach", "must be one of owner, integration, platform"},
		{"effectClass unknown", set("/manifest/effectClass", "delete"), "/manifest/effectClass", "must be one of read, write, admin"},
		{"safeForAgents as string", set("/manifest/safeForAgents", "yes"), "/manifest/safeForAgents", "must be a boolean, got string"},
		{"delegable false", set("/manifest/delegable", false), "/manifest/delegable", "must be true"},
		{"delegable as string", set("/manifest/delegable", "true"), "/manifest/delegable", "must be true"},
		{"descriptorKind unknown", set("/manifest/descriptorKind", "passive"), "/manifest/descriptorKind", "must be one of invocable, authority"},
		{"callerConstraint unknown", set("/manifest/callerConstraint", "anyone"), "/manifest/callerConstraint", "must be one of workflow-step"},
		// examples
		{"examples not an array", set("/manifest/examples", map[string]any{}), "/manifest/examples", "must be an array, got object"},
		{"examples too many", set("/manifest/examples", objects(21)), "/manifest/examples", "must have at most 20 entries, got 21"},
		{"example not an object", set("/manifest/examples/0", "x"), "/manifest/examples/0", "must be an object, got string"},
		// trustedContextProjection
		{"tcp not an object", set("/manifest/trustedContextProjection", true), "/manifest/trustedContextProjection", "must be an object, got boolean"},
		{"tcp schemaVersion missing", del("/manifest/trustedContextProjection/schemaVersion"), "/manifest/trustedContextProjection", "missing required field schemaVersion"},
		{"tcp profile missing", del("/manifest/trustedContextProjection/profile"), "/manifest/trustedContextProjection", "missing required field profile"},
		{"tcp delivery missing", del("/manifest/trustedContextProjection/delivery"), "/manifest/trustedContextProjection", "missing required field delivery"},
		{"tcp schemaVersion 2", set("/manifest/trustedContextProjection/schemaVersion", 2), "/manifest/trustedContextProjection/schemaVersion", "must be 1"},
		{"tcp schemaVersion as string", set("/manifest/trustedContextProjection/schemaVersion", "1"), "/manifest/trustedContextProjection/schemaVersion", "must be 1"},
		{"tcp schemaVersion 1.0", set("/manifest/trustedContextProjection/schemaVersion", json.Number("1.0")), "/manifest/trustedContextProjection/schemaVersion", "must be an integer"},
		{"tcp profile unknown", set("/manifest/trustedContextProjection/profile", "critical-operation-v2"), "/manifest/trustedContextProjection/profile", "must be one of critical-operation-v1"},
		{"tcp delivery wrong", set("/manifest/trustedContextProjection/delivery", "client-envelope"), "/manifest/trustedContextProjection/delivery", "must be server-envelope"},
		{"tcp unknown field", set("/manifest/trustedContextProjection/extra", 1), "/manifest/trustedContextProjection/extra", "unknown field extra"},
		// requiredBindings
		{"requiredBindings not an array", set("/manifest/requiredBindings", map[string]any{}), "/manifest/requiredBindings", "must be an array, got object"},
		{"requiredBindings too many", set("/manifest/requiredBindings", bindings(21)), "/manifest/requiredBindings", "must have at most 20 entries, got 21"},
		{"binding roleKey missing", del("/manifest/requiredBindings/0/roleKey"), "/manifest/requiredBindings/0", "missing required field roleKey"},
		{"binding ownerKind missing", del("/manifest/requiredBindings/0/ownerKind"), "/manifest/requiredBindings/0", "missing required field ownerKind"},
		{"binding ownerKind unknown", set("/manifest/requiredBindings/0/ownerKind", "team"), "/manifest/requiredBindings/0/ownerKind", "must be one of system, org, project, app, session, biome, user"},
		{"binding remedy ref invalid", set("/manifest/requiredBindings/0/remedyCapabilityRef", "grant-role"), "/manifest/requiredBindings/0/remedyCapabilityRef", "must be a capability ref"},
		{"binding remedy ref leading zero", set("/manifest/requiredBindings/0/remedyCapabilityRef", "a:b@007"), "/manifest/requiredBindings/0/remedyCapabilityRef", "leading zeros"},
		{"binding unknown field", set("/manifest/requiredBindings/0/scope", "x"), "/manifest/requiredBindings/0/scope", "unknown field scope"},
		{"roleKey not an object", set("/manifest/requiredBindings/0/roleKey", "repo:admin"), "/manifest/requiredBindings/0/roleKey", "must be an object, got string"},
		{"roleKey resourceKind missing", del("/manifest/requiredBindings/0/roleKey/resourceKind"), "/manifest/requiredBindings/0/roleKey", "missing required field resourceKind"},
		{"roleKey role missing", del("/manifest/requiredBindings/0/roleKey/role"), "/manifest/requiredBindings/0/roleKey", "missing required field role"},
		{"roleKey resourceKind pattern", set("/manifest/requiredBindings/0/roleKey/resourceKind", "Repository"), "/manifest/requiredBindings/0/roleKey/resourceKind", "must match ^[a-z][a-z0-9-]{0,62}$"},
		{"roleKey role pattern", set("/manifest/requiredBindings/0/roleKey/role", "main_tainer"), "/manifest/requiredBindings/0/roleKey/role", "must match"},
		{"roleKey role too long", set("/manifest/requiredBindings/0/roleKey/role", "a"+strings.Repeat("b", 63)), "/manifest/requiredBindings/0/roleKey/role", "must match"},
		{"roleKey qualifier pattern", set("/manifest/requiredBindings/0/roleKey/qualifier", "-x"), "/manifest/requiredBindings/0/roleKey/qualifier", "must match"},
		{"roleKey unknown field", set("/manifest/requiredBindings/0/roleKey/scope", "x"), "/manifest/requiredBindings/0/roleKey/scope", "unknown field scope"},
		// humanBaseline
		{"humanBaseline not an object", set("/manifest/humanBaseline", "org-role"), "/manifest/humanBaseline", "must be an object, got string"},
		{"humanBaseline kind missing", del("/manifest/humanBaseline/kind"), "/manifest/humanBaseline", "missing required field kind"},
		{"humanBaseline kind unknown", set("/manifest/humanBaseline/kind", "everyone"), "/manifest/humanBaseline/kind", "must be one of explicit-only, org-role, org-administrators"},
		{"org-role minimumOrgRole missing", del("/manifest/humanBaseline/minimumOrgRole"), "/manifest/humanBaseline", "missing required field minimumOrgRole"},
		{"org-role minimumOrgRole unknown", set("/manifest/humanBaseline/minimumOrgRole", "org_guest"), "/manifest/humanBaseline/minimumOrgRole", "must be one of org_owner, org_admin, org_member"},
		{"org-role environments missing", del("/manifest/humanBaseline/environments"), "/manifest/humanBaseline", "missing required field environments"},
		{"org-role environment unknown", set("/manifest/humanBaseline/environments/1", "production"), "/manifest/humanBaseline/environments/1", "must be one of system, org, project, app, session, sandbox, public, store-review, trusted-dev"},
		{"org-role environments not an array", set("/manifest/humanBaseline/environments", "org"), "/manifest/humanBaseline/environments", "must be an array, got string"},
		{"org-role dimensions not an object", set("/manifest/humanBaseline/dimensions", []any{}), "/manifest/humanBaseline/dimensions", "must be an object, got array"},
		{"org-role dimension not an array", set("/manifest/humanBaseline/dimensions/team", "platform"), "/manifest/humanBaseline/dimensions/team", "must be an array, got string"},
		{"org-role dimension value not a string", set("/manifest/humanBaseline/dimensions/team", []any{1}), "/manifest/humanBaseline/dimensions/team/0", "must be a string, got number"},
		{"org-role unknown field", set("/manifest/humanBaseline/extra", 1), "/manifest/humanBaseline/extra", "unknown field extra"},
		{"explicit-only with environments", set("/manifest/humanBaseline", map[string]any{"kind": "explicit-only", "environments": []any{"org"}}), "/manifest/humanBaseline/environments", "unknown field environments"},
		{"org-administrators with minimumOrgRole", set("/manifest/humanBaseline/kind", "org-administrators"), "/manifest/humanBaseline/minimumOrgRole", "unknown field minimumOrgRole"},
		{"org-administrators environments missing", set("/manifest/humanBaseline", map[string]any{"kind": "org-administrators"}), "/manifest/humanBaseline", "missing required field environments"},
		{"org-administrators environment unknown", set("/manifest/humanBaseline", map[string]any{"kind": "org-administrators", "environments": []any{"prod"}}), "/manifest/humanBaseline/environments/0", "must be one of system"},
		// instanceGrade
		{"instanceGrade not an object", set("/manifest/instanceGrade", []any{}), "/manifest/instanceGrade", "must be an object, got array"},
		{"instanceGrade resourceType missing", del("/manifest/instanceGrade/resourceType"), "/manifest/instanceGrade", "missing required field resourceType"},
		{"instanceGrade relation missing", del("/manifest/instanceGrade/relation"), "/manifest/instanceGrade", "missing required field relation"},
		{"instanceGrade environments missing", del("/manifest/instanceGrade/environments"), "/manifest/instanceGrade", "missing required field environments"},
		{"instanceGrade resourceType pattern", set("/manifest/instanceGrade/resourceType", "repository"), "/manifest/instanceGrade/resourceType", "must match ^[a-z][a-z0-9-]*_[a-z][a-z0-9_]*$"},
		{"instanceGrade relation pattern", set("/manifest/instanceGrade/relation", "Writer"), "/manifest/instanceGrade/relation", "must match ^[a-z][a-z0-9_]*$"},
		{"instanceGrade environment unknown", set("/manifest/instanceGrade/environments/0", "staging"), "/manifest/instanceGrade/environments/0", "must be one of system"},
		{"instanceGrade unknown field", set("/manifest/instanceGrade/extra", 1), "/manifest/instanceGrade/extra", "unknown field extra"},
		// invocation
		{"invocation not an object", set("/invocation", "http"), "/invocation", "must be an object, got string"},
		{"invocation kind wrong", set("/invocation/kind", "grpc"), "/invocation/kind", "must be http"},
		{"invocation kind missing", del("/invocation/kind"), "/invocation", "missing required field kind"},
		{"invocation url missing", del("/invocation/url"), "/invocation", "missing required field url"},
		{"invocation url not http", set("/invocation/url", "ftp://example.com/x"), "/invocation/url", "must match"},
		{"invocation url relative", set("/invocation/url", "/pull-requests"), "/invocation/url", "must be a valid uri"},
		{"invocation timeoutMs missing", del("/invocation/timeoutMs"), "/invocation", "missing required field timeoutMs"},
		{"invocation timeoutMs zero", set("/invocation/timeoutMs", 0), "/invocation/timeoutMs", "must be at least 1, got 0"},
		{"invocation timeoutMs too large", set("/invocation/timeoutMs", 120001), "/invocation/timeoutMs", "must be at most 120000, got 120001"},
		{"invocation timeoutMs fractional", set("/invocation/timeoutMs", 1.5), "/invocation/timeoutMs", "must be an integer, got number"},
		{"invocation timeoutMs as string", set("/invocation/timeoutMs", "100"), "/invocation/timeoutMs", "must be an integer, got string"},
		{"invocation unknown field", set("/invocation/headers", map[string]any{}), "/invocation/headers", "unknown field headers"},
	}
	base := readTestdata(t, validFile)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, problems := ParseContribution("c.json", apply(t, base, tt.edit))
			if len(problems) != 1 {
				t.Fatalf("want exactly one problem at %q (%s), got %d: %v", tt.path, tt.msg, len(problems), problems)
			}
			p := problems[0]
			if p.File != "c.json" || p.Path != tt.path || !strings.Contains(p.Message, tt.msg) {
				t.Fatalf("got %v, want c.json: %s: ...%s...", p, tt.path, tt.msg)
			}
			if !reflect.DeepEqual(c, Contribution{}) {
				t.Fatalf("invalid contribution returned a value: %+v", c)
			}
		})
	}
}

func TestValidateContributionMatchesParse(t *testing.T) {
	data := readTestdata(t, validFile)
	a, pa := ParseContribution("f", data)
	b, pb := ValidateContribution("f", json.RawMessage(data))
	if len(pa) > 0 || len(pb) > 0 || !reflect.DeepEqual(a, b) {
		t.Fatalf("ParseContribution and ValidateContribution differ: %v %v", pa, pb)
	}
	broken := apply(t, data, set("/manifest/riskTier", "x"))
	_, pa = ParseContribution("f", broken)
	_, pb = ValidateContribution("f", broken)
	if !reflect.DeepEqual(pa, pb) || len(pa) != 1 {
		t.Fatalf("problems differ: %v vs %v", pa, pb)
	}
}

func TestEveryProblemIsReported(t *testing.T) {
	data := apply(t, readTestdata(t, validFile),
		set("/manifest/riskTier", "x"), set("/manifest/title", 1), del("/manifest/summary"),
		set("/invocation/timeoutMs", 0), set("/manifest/inputSchema/type", 5))
	_, problems := ParseContribution("c.json", data)
	want := []string{
		"c.json: /invocation/timeoutMs: must be at least 1, got 0",
		"c.json: /manifest: missing required field summary",
		"c.json: /manifest/inputSchema/type: invalid JSON Schema",
		"c.json: /manifest/riskTier: must be one of low, medium, high, critical",
		"c.json: /manifest/title: must be a string, got number",
	}
	if len(problems) < len(want) {
		t.Fatalf("got %d problems, want at least %d: %v", len(problems), len(want), problems)
	}
	for _, w := range want {
		found := false
		for _, p := range problems {
			found = found || strings.HasPrefix(p.String(), w)
		}
		if !found {
			t.Errorf("missing %q in %v", w, problems)
		}
	}
}

// extractInline returns the first inline contribution of a biome.json as standalone JSON.
func extractInline(t testing.TB, biome []byte) []byte {
	t.Helper()
	var doc struct {
		Xema struct {
			Contributions struct {
				Inline []json.RawMessage `json:"inline"`
			} `json:"contributions"`
		} `json:"xema"`
	}
	if err := json.Unmarshal(biome, &doc); err != nil || len(doc.Xema.Contributions.Inline) == 0 {
		t.Fatalf("no inline contribution: %v", err)
	}
	return doc.Xema.Contributions.Inline[0]
}

// The ingestion API validates from many goroutines at once; run under -race.
func TestParseContributionConcurrently(t *testing.T) {
	data := readTestdata(t, validFile)
	broken := apply(t, data, set("/manifest/riskTier", "x"))
	done := make(chan []Problem)
	for i := range 8 {
		go func() {
			in := data
			if i%2 == 1 {
				in = broken
			}
			_, ps := ParseContribution("c.json", in)
			done <- ps
		}()
	}
	for i := 0; i < 8; i++ {
		if ps := <-done; len(ps) > 1 {
			t.Errorf("unexpected problems: %v", ps)
		}
	}
}

// TestResourceAnnotation: x-xema-resource binds a grant's resource globs only on a string
// property; anything else is refused with a pointer to the offending value.
func TestResourceAnnotation(t *testing.T) {
	withInput := func(props string) []byte {
		return []byte(`{"kind": "capability", "manifest": {"ref": "artifact:read@1", "title": "t", "summary": "s",
 "sideEffects": "none", "inputSchema": {"type": "object", "properties": {` + props + `}}, "outputSchema": {}, "riskTier": "low", "requiresApproval": false}}`)
	}
	const at = "/manifest/inputSchema/properties/"
	for name, tc := range map[string]struct{ props, path, msg string }{
		"integer":           {`"noteId": {"type": "integer", "x-xema-resource": true}`, at + "noteId/type", `must have type "string"`},
		"string or integer": {`"noteId": {"type": ["string", "integer"], "x-xema-resource": true}`, at + "noteId/type", `must have type "string"`},
		"no type":           {`"noteId": {"x-xema-resource": true}`, at + "noteId/type", `must have type "string"`},
		"not true":          {`"noteId": {"type": "string", "x-xema-resource": "yes"}`, at + "noteId/x-xema-resource", "must be true"},
		"two resources":     {`"a": {"type": "string", "x-xema-resource": true}, "b": {"type": "string", "x-xema-resource": true}`, at + "b/x-xema-resource", "only one property"},
		"escaped pointer":   {`"a/b~c": {"type": "number", "x-xema-resource": true}`, at + "a~1b~0c/type", `must have type "string"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, problems := ParseContribution("c.json", withInput(tc.props))
			if len(problems) != 1 || problems[0].Path != tc.path || !strings.Contains(problems[0].Message, tc.msg) {
				t.Fatalf("problems %+v, want one at %s saying %q", problems, tc.path, tc.msg)
			}
		})
	}
	for name, props := range map[string]string{
		"string":       `"noteId": {"type": "string", "x-xema-resource": true}`,
		"optional":     `"noteId": {"type": "string", "x-xema-resource": true}, "other": {"type": "integer"}`,
		"not a marker": `"noteId": {"type": "integer"}`,
	} {
		c, problems := ParseContribution("c.json", withInput(props))
		if len(problems) != 0 {
			t.Fatalf("%s: %+v", name, problems)
		}
		if got, want := ResourceProperty(c.Manifest.InputSchema), map[bool]string{true: "noteId", false: ""}[name != "not a marker"]; got != want {
			t.Fatalf("%s: resource property %q, want %q", name, got, want)
		}
	}
}
