package federation

import (
	"strings"
	"testing"
)

// TestDraft07SpecificPointer: the reported location is an RFC 6901 pointer, "~" escaped as
// "~0" and "/" as "~1".
func TestDraft07SpecificPointer(t *testing.T) {
	schema := map[string]any{
		"$schema": "http://json-schema.org/draft-07/schema#",
		"properties": map[string]any{
			"a~b/c": map[string]any{"type": "array", "additionalItems": false},
		},
	}
	_, err := toDraft2020(schema)
	if err == nil || !strings.Contains(err.Error(), "/properties/a~0b~1c/additionalItems") {
		t.Fatalf("toDraft2020 = %v, want the pointer /properties/a~0b~1c/additionalItems", err)
	}
}

// TestDraft07SpecificDeterministic: of several draft-07-only keywords in sibling properties,
// the same one (the first in key order) is reported on every run, whatever the map order.
func TestDraft07SpecificDeterministic(t *testing.T) {
	props := map[string]any{}
	for _, k := range []string{"m", "z", "b", "q", "d", "x", "k", "e", "s", "c"} {
		props[k] = map[string]any{"dependencies": map[string]any{}}
	}
	schema := map[string]any{"$schema": "http://json-schema.org/draft-07/schema", "properties": props}
	for range 50 {
		if got := draft07Specific(schema, ""); got != "/properties/b/dependencies" {
			t.Fatalf("draft07Specific = %q, want /properties/b/dependencies", got)
		}
	}
	// Still accepted once nothing differs: the $schema is dropped, the rest kept.
	ok, err := toDraft2020(map[string]any{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"})
	if err != nil || ok["$schema"] != nil || ok["type"] != "object" {
		t.Fatalf("plain draft-07 schema: %v, %v", ok, err)
	}
}
