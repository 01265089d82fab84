package inputschema

// The gateway closes every input schema when it publishes the capability: an
// object the author left open (no additionalProperties, no
// unevaluatedProperties) gets "unevaluatedProperties": false, so an unknown or
// misspelt property is rejected at every depth instead of being passed on.
//
// unevaluatedProperties (rather than additionalProperties) is what keeps
// compositions working: it sees the properties evaluated by allOf, anyOf,
// oneOf, $ref and friends, so {"allOf": [A, B]} accepts the properties of A and
// B together. For the same reason the closing is only applied where a schema
// applies to a value of its own (the root, properties, items, ...), never to
// an in-place branch (an allOf entry, a $defs entry reached through $ref):
// closing a branch would make it reject the properties of its siblings.

// position is how a subschema applies relative to the schema holding it.
type position int

const (
	// valuePosition: the subschema applies to a child value (properties,
	// items, ...).
	valuePosition position = iota
	// inPlacePosition: the subschema applies to the same value (allOf, then,
	// dependentSchemas).
	inPlacePosition
	// definitionPosition: the subschema applies wherever it is referenced
	// ($defs).
	definitionPosition
	// conditionPosition: the subschema's failure is not a rejection (not, if).
	conditionPosition
)

var (
	valueKeywords       = []string{"additionalProperties", "unevaluatedProperties", "items", "contains", "unevaluatedItems", "propertyNames"}
	valueMapKeywords    = []string{"properties", "patternProperties"}
	inPlaceKeywords     = []string{"then", "else"}
	inPlaceListKeywords = []string{"allOf", "anyOf", "oneOf"}
	inPlaceMapKeywords  = []string{"dependentSchemas"}
	definitionKeywords  = []string{"$defs", "definitions"}
	conditionKeywords   = []string{"not", "if"}
)

// eachSubschema calls fn with every direct subschema of s, and its position.
func eachSubschema(s map[string]any, fn func(sub any, pos position)) {
	for _, kw := range valueKeywords {
		if sub, ok := s[kw]; ok {
			fn(sub, valuePosition)
		}
	}
	for _, kw := range valueMapKeywords {
		for _, sub := range asMap(s[kw]) {
			fn(sub, valuePosition)
		}
	}
	for _, sub := range asList(s["prefixItems"]) {
		fn(sub, valuePosition)
	}
	for _, kw := range inPlaceKeywords {
		if sub, ok := s[kw]; ok {
			fn(sub, inPlacePosition)
		}
	}
	for _, kw := range inPlaceListKeywords {
		for _, sub := range asList(s[kw]) {
			fn(sub, inPlacePosition)
		}
	}
	for _, kw := range inPlaceMapKeywords {
		for _, sub := range asMap(s[kw]) {
			fn(sub, inPlacePosition)
		}
	}
	for _, kw := range definitionKeywords {
		for _, sub := range asMap(s[kw]) {
			fn(sub, definitionPosition)
		}
	}
	for _, kw := range conditionKeywords {
		if sub, ok := s[kw]; ok {
			fn(sub, conditionPosition)
		}
	}
}

// closeSchema closes root in place. The root is always closed, whatever its
// type: an input schema of {} takes no properties rather than any.
func closeSchema(root map[string]any) {
	if !declaresUnknownProperties(root) {
		root["unevaluatedProperties"] = false
	}
	closeNode(root, false)
}

// closeNode closes schema if it applies to a value of its own (valuePos) and
// may hold an object, then walks its subschemas. "not" and "if" are not
// walked: their failure is not a rejection, so closing inside them would turn
// an unknown property into a way to satisfy a "not" or to pick another
// if/then/else branch.
func closeNode(node any, valuePos bool) {
	s, ok := node.(map[string]any)
	if !ok {
		return
	}
	if valuePos && !declaresUnknownProperties(s) && mayBeObject(s) {
		s["unevaluatedProperties"] = false
	}
	eachSubschema(s, func(sub any, pos position) {
		if pos != conditionPosition {
			closeNode(sub, pos == valuePosition)
		}
	})
}

// declaresUnknownProperties reports whether the author said what to do with
// properties not listed, in which case that choice stands.
func declaresUnknownProperties(s map[string]any) bool {
	_, additional := s["additionalProperties"]
	_, unevaluated := s["unevaluatedProperties"]
	return additional || unevaluated
}

// mayBeObject reports whether s, or a branch applied in place with it, is
// object-typed: type object, properties or patternProperties. A reference
// counts as object-typed without being followed: closing a schema that turns
// out not to be an object changes nothing, leaving one open would.
func mayBeObject(s map[string]any) bool {
	if _, ok := s["properties"]; ok {
		return true
	}
	if _, ok := s["patternProperties"]; ok {
		return true
	}
	if _, ok := s["$ref"]; ok {
		return true
	}
	if _, ok := s["$dynamicRef"]; ok {
		return true
	}
	switch t := s["type"].(type) {
	case string:
		if t == "object" {
			return true
		}
	case []any:
		for _, e := range t {
			if e == "object" {
				return true
			}
		}
	}
	found := false
	eachSubschema(s, func(sub any, pos position) {
		if bs, ok := sub.(map[string]any); ok && pos == inPlacePosition && !found {
			found = mayBeObject(bs)
		}
	})
	return found
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
