package grant

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"testing"

	"github.com/xemahq/xema/internal/store"
)

var update = flag.Bool("update", false, "rewrite testdata/data-xema.golden.json")

// goldenInput touches every field of data.xema: a catalog with a capability declaring
// requiredBindings and instanceGrade, a pinned older version, grants of two orgs, one
// customizing every field a customization has, an empty customize entry, a hashed revision.
func goldenInput(t *testing.T) Input {
	t.Helper()
	b := demoBiome("1.0.0")
	caps := catalog(t, b)
	caps = append(caps, store.Capability{Ref: "kb:page.share@1", BiomeID: "demo", BiomeVersion: "1.0.0",
		Lifecycle: store.LifecycleDeprecated, ReplacedBy: "kb:page.share@2",
		Manifest: json.RawMessage(`{"ref":"kb:page.share@1","riskTier":"medium","outputClassification":"confidential",
			"requiredBindings":[{"resourceKind":"kb","role":"editor","remedyCapabilityRef":"kb:binding.create@1"}],
			"instanceGrade":{"resourceType":"doc_page","relation":"editor","environments":["project"]},
			"humanBaseline":{"kind":"org-role","minimumOrgRole":"org_admin","environments":["org","project"]},
			"safeForAgents":true,"callerConstraint":"human-only","descriptorKind":"action"}`)})
	old := demoBiome("0.9.0")
	pinned := catalog(t, old)[:2]
	grants := []store.Grant{
		demoGrant(t, "g_1", "internal-agent", t0, `{"kb:page.write@1":{"environments":["project","app"],
			"subjects":["agent:bot","group:g"],"resources":["kb/pages/*","kb/drafts/**"],"audience":["public","internal"],
			"rateLimit":{"requests":10,"per":"1m"},"quota":{"requests":100,"per":"24h"},"requiresApproval":false},
			"kb:admin.purge@1":{}}`),
		{ID: "g_2", Org: "beta", BiomeID: "demo", BiomeVersion: "0.9.0", Profile: "read-only-assistant", ApprovedAt: t0},
	}
	return Input{Capabilities: caps, Pinned: pinned, Grants: grants,
		Biomes:       []store.BiomeVersion{storedVersion(t, b), storedVersion(t, old)},
		Environments: DefaultEnvironments(), Profiles: Builtin()}
}

// TestDataGolden: the typed document (Build) and the map Compile hands to the engine
// encode to exactly the bytes the map-literal compiler produced (testdata, recorded from it
// before the document was typed).
func TestDataGolden(t *testing.T) {
	in := goldenInput(t)
	data, err := Compile(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(data, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	const file = "testdata/data-xema.golden.json"
	if *update {
		if err := os.WriteFile(file, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want = bytes.TrimSuffix(want, []byte("\n"))
	if !bytes.Equal(got, want) {
		t.Errorf("Compile encodes to\n%s\nwant (%s)\n%s", got, file, want)
	}
	typed, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := json.MarshalIndent(typed, "", " "); !bytes.Equal(got, want) {
		t.Errorf("Build encodes to\n%s\nwant (%s)\n%s", got, file, want)
	}
	// What the engine encodes: compact, under "xema".
	compact := func(v any) string {
		raw, err := json.Marshal(map[string]any{"xema": v})
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	if compact(typed) != compact(data) {
		t.Error("Build and Compile encode differently")
	}
}

// TestDataFieldsOf: the data types tag every field with a plain JSON name, so the map of a
// grant entry has the same keys as its encoding.
func TestDataFieldsOf(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeFor[Data](), reflect.TypeFor[CapabilityData](), reflect.TypeFor[GrantData](),
		reflect.TypeFor[ProfileData](), reflect.TypeFor[ApprovalData](), reflect.TypeFor[LimitData](),
		reflect.TypeFor[BiomeData](), reflect.TypeFor[EnvironmentData]()} {
		names := jsonFields(typ)
		for i, name := range names {
			if tag := typ.Field(i).Tag.Get("json"); tag != name || name == "" || name == "-" {
				t.Errorf("%s.%s: json tag %q, want a plain name", typ.Name(), typ.Field(i).Name, tag)
			}
			if i > 0 && names[i-1] >= name {
				t.Errorf("%s: field %q declared after %q: keep JSON names in alphabetical order", typ.Name(), name, names[i-1])
			}
		}
	}
	g := GrantData{GrantID: "g", Environments: Set{"project": true}, Resources: []string{"a/*"}}
	raw, _ := json.Marshal(g)
	viaMap, _ := json.Marshal(fieldsOf(g))
	if string(raw) != string(viaMap) {
		t.Errorf("fieldsOf encodes to %s, the struct to %s", viaMap, raw)
	}
}
