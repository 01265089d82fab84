package federation

import (
	"fmt"
	"maps"
	"slices"

	"github.com/xemahq/xema/internal/strictjson"
)

// draft07 is the dialect most MCP servers (zod-to-json-schema) declare.
var draft07 = map[string]bool{"http://json-schema.org/draft-07/schema#": true, "http://json-schema.org/draft-07/schema": true}

// draft07Only are the draft-07 keywords whose meaning differs in draft 2020-12.
var draft07Only = []string{"additionalItems", "dependencies"}

// toDraft2020 accepts a draft-07 input schema as draft 2020-12 when it uses nothing whose
// meaning differs between the two (array-form items, additionalItems, dependencies): its
// top-level $schema is dropped, everything else is kept as written. Another dialect, or a
// draft-07 schema using those keywords, is refused by name.
func toDraft2020(schema map[string]any) (map[string]any, error) {
	d, _ := schema["$schema"].(string)
	if !draft07[d] {
		return schema, nil
	}
	if where := draft07Specific(schema, ""); where != "" {
		return nil, fmt.Errorf("draft-07 schema uses %s, which means something else in draft 2020-12", where)
	}
	out := maps.Clone(schema)
	delete(out, "$schema")
	return out, nil
}

func draft07Specific(node any, at string) string {
	switch n := node.(type) {
	case map[string]any:
		for _, k := range draft07Only {
			if _, ok := n[k]; ok {
				return at + "/" + k
			}
		}
		if _, ok := n["items"].([]any); ok {
			return at + "/items (array form)"
		}
		// In key order, so that of several problems the same one is reported every time.
		for _, k := range slices.Sorted(maps.Keys(n)) {
			if w := draft07Specific(n[k], strictjson.Pointer(at, k)); w != "" {
				return w
			}
		}
	case []any:
		for i, v := range n {
			if w := draft07Specific(v, fmt.Sprintf("%s/%d", at, i)); w != "" {
				return w
			}
		}
	}
	return ""
}
