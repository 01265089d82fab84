package catalog

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/xemahq/xema/internal/store"
)

// TestSchemaCache: an entry's compiled schemas are reused while ref, biome version and
// manifest are the same, and compiled again when any of them differs: a stored manifest
// changed under the same ref@version (by hand, a migration) is never validated with the old
// schema, and another version never shares one.
func TestSchemaCache(t *testing.T) {
	c := New(nil)
	capa := func(version, inputType string) store.Capability {
		return store.Capability{Ref: "note:read@1", BiomeID: "notes", BiomeVersion: version, Lifecycle: "published",
			Manifest: json.RawMessage(fmt.Sprintf(`{"ref":"note:read@1","title":"t","summary":"s","sideEffects":"none",
				"inputSchema":{"type":"object","properties":{"id":{"type":%q}},"required":["id"],"additionalProperties":false},
				"outputSchema":{"type":"object"},"riskTier":"low","requiresApproval":false}`, inputType))}
	}
	entry := func(sc store.Capability) *Entry {
		t.Helper()
		e, err := c.entry(sc)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	first := entry(capa("1.0.0", "string"))
	if again := entry(capa("1.0.0", "string")); again.Input != first.Input || again.Output != first.Output {
		t.Fatal("the same ref@version and manifest compiled again")
	}
	changed := entry(capa("1.0.0", "integer"))
	if changed.Input == first.Input {
		t.Fatal("a changed manifest under the same ref@version kept the old schema")
	}
	str, num := json.RawMessage(`{"id":"n1"}`), json.RawMessage(`{"id":7}`)
	if len(changed.Input.Validate(num)) != 0 || len(changed.Input.Validate(str)) == 0 {
		t.Fatal("the recompiled schema does not validate as its manifest says")
	}
	if len(first.Input.Validate(str)) != 0 || len(first.Input.Validate(num)) == 0 {
		t.Fatal("the first entry's schema changed under it")
	}
	if other := entry(capa("1.0.1", "integer")); other.Input == changed.Input {
		t.Fatal("another version shares a compiled schema")
	}
	if back := entry(capa("1.0.0", "string")); back.Input == changed.Input || len(back.Input.Validate(str)) != 0 {
		t.Fatal("the manifest changed back is validated with the other one's schema")
	}
}
