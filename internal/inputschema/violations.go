package inputschema

import (
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/xemahq/xema/internal/strictjson"
)

// printer words the rare error kinds that describe does not.
var printer = message.NewPrinter(language.English)

// violation is a Violation still carrying its location as tokens (for
// sorting), whether it is an unknown-property report, and for a type
// mismatch the types wanted (to merge the mismatches of anyOf branches).
type violation struct {
	tokens  []string
	message string
	unknown bool
	typ     *kind.Type
}

// violations flattens the error tree into its leaf causes, deduplicated and
// sorted by path.
func violations(root *jsonschema.ValidationError) []Violation {
	var leaves []violation
	collect(root, &leaves)
	leaves = dropShadowedUnknowns(leaves)
	leaves = mergeTypes(leaves)

	slices.SortFunc(leaves, func(a, b violation) int {
		if c := comparePaths(a.tokens, b.tokens); c != 0 {
			return c
		}
		return strings.Compare(a.message, b.message)
	})
	out := make([]Violation, 0, len(leaves))
	for i, l := range leaves {
		if i > 0 && l.message == leaves[i-1].message && slices.Equal(l.tokens, leaves[i-1].tokens) {
			continue
		}
		out = append(out, Violation{Path: strictjson.Pointer("", l.tokens...), Message: l.message})
	}
	return out
}

func collect(e *jsonschema.ValidationError, out *[]violation) {
	at := e.InstanceLocation
	add := func(tokens []string, msg string) {
		*out = append(*out, violation{tokens: tokens, message: msg})
	}
	switch k := e.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.AllOf, *kind.AnyOf, *kind.Reference:
		if len(e.Causes) == 0 {
			add(at, "is invalid")
		}
		for _, c := range e.Causes {
			collect(c, out)
		}
	case *kind.OneOf:
		if len(k.Subschemas) > 0 {
			add(at, fmt.Sprintf("must match exactly one oneOf schema, but matches both %d and %d", k.Subschemas[0], k.Subschemas[1]))
			return
		}
		for _, c := range e.Causes {
			collect(c, out)
		}
	case *kind.FalseSchema:
		switch keyword(e.SchemaURL) {
		case "unevaluatedProperties", "additionalProperties":
			*out = append(*out, violation{tokens: at, message: "unknown property " + last(at), unknown: true})
		case "unevaluatedItems", "items":
			add(at, "unexpected item")
		default:
			add(at, "is not allowed")
		}
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			*out = append(*out, violation{tokens: child(at, p), message: "unknown property " + p, unknown: true})
		}
	case *kind.Required:
		for _, p := range k.Missing {
			add(at, "missing required property "+p)
		}
	case *kind.DependentRequired:
		for _, p := range k.Missing {
			add(at, fmt.Sprintf("missing required property %s (required when %s is present)", p, k.Prop))
		}
	case *kind.Dependency:
		for _, p := range k.Missing {
			add(at, fmt.Sprintf("missing required property %s (required when %s is present)", p, k.Prop))
		}
	case *kind.Type:
		*out = append(*out, violation{tokens: at, message: describe(k), typ: k})
	case *kind.PropertyNames:
		add(child(at, k.Property), "invalid property name "+k.Property)
	default:
		add(at, describe(e.ErrorKind))
	}
}

// describe words a leaf error for a person (or an agent) to act on.
func describe(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Type:
		wants := make([]string, len(k.Want))
		for i, w := range k.Want {
			wants[i] = article(w)
		}
		return fmt.Sprintf("must be %s, got %s", strings.Join(wants, " or "), k.Got)
	case *kind.Enum:
		if len(k.Want) == 0 {
			return "no value is allowed (empty enum)"
		}
		if len(k.Want) == 1 {
			return "must be " + literal(k.Want[0])
		}
		lits := make([]string, len(k.Want))
		for i, w := range k.Want {
			lits[i] = literal(w)
		}
		return "must be one of " + strings.Join(lits, ", ")
	case *kind.Const:
		return "must be " + literal(k.Want)
	case *kind.Format:
		return "must be a valid " + k.Want
	case *kind.Pattern:
		return "must match pattern " + k.Want
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d characters long", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long", k.Want)
	case *kind.Minimum:
		return "must be >= " + number(k.Want)
	case *kind.Maximum:
		return "must be <= " + number(k.Want)
	case *kind.ExclusiveMinimum:
		return "must be > " + number(k.Want)
	case *kind.ExclusiveMaximum:
		return "must be < " + number(k.Want)
	case *kind.MultipleOf:
		return "must be a multiple of " + number(k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d items", k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d items", k.Want)
	case *kind.UniqueItems:
		return fmt.Sprintf("must not repeat items (items %d and %d are equal)", k.Duplicates[0], k.Duplicates[1])
	case *kind.Contains:
		return "must contain a matching item"
	case *kind.MinContains:
		return fmt.Sprintf("must contain at least %d matching items", k.Want)
	case *kind.MaxContains:
		return fmt.Sprintf("must contain at most %d matching items", k.Want)
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %d properties", k.Want)
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %d properties", k.Want)
	case *kind.Not:
		return "must not match the schema under not"
	case *kind.RefCycle:
		return "cannot be validated: the schema refers to itself in a cycle"
	default:
		return k.LocalizedString(printer)
	}
}

// dropShadowedUnknowns drops an "unknown property" report for a property that
// has another violation at or below it: a property declared inside an allOf
// branch or a $ref that fails its own schema is also left unevaluated, and
// calling it unknown as well would send the caller after the wrong fix.
func dropShadowedUnknowns(vs []violation) []violation {
	shadowed := map[string]bool{} // pointers at or above a violation other than unknown
	for _, v := range vs {
		if !v.unknown {
			for i := range len(v.tokens) + 1 {
				shadowed[strictjson.Pointer("", v.tokens[:i]...)] = true
			}
		}
	}
	return slices.DeleteFunc(vs, func(v violation) bool {
		return v.unknown && shadowed[strictjson.Pointer("", v.tokens...)]
	})
}

// mergeTypes folds the type mismatches found at one path (one per anyOf or
// oneOf branch) into one: "must be a string or an integer, got boolean".
func mergeTypes(vs []violation) []violation {
	first := map[string]int{} // pointer → index in out of its first mismatch
	out := vs[:0]
	for _, v := range vs {
		if v.typ == nil {
			out = append(out, v)
			continue
		}
		p := strictjson.Pointer("", v.tokens...)
		i, seen := first[p]
		if !seen {
			first[p] = len(out)
			out = append(out, v)
			continue
		}
		merged := &kind.Type{Got: v.typ.Got, Want: slices.Clone(out[i].typ.Want)}
		for _, w := range v.typ.Want {
			if !slices.Contains(merged.Want, w) {
				merged.Want = append(merged.Want, w)
			}
		}
		slices.Sort(merged.Want) // branch order is not stable
		out[i].typ, out[i].message = merged, describe(merged)
	}
	return out
}

// keyword is the last keyword of a schema location, "" when it is the
// name of a property.
func keyword(schemaURL string) string {
	_, frag, _ := strings.Cut(schemaURL, "#")
	toks := strings.Split(frag, "/")
	if n := len(toks); n >= 2 && (toks[n-2] == "properties" || toks[n-2] == "patternProperties") {
		return ""
	}
	return toks[len(toks)-1]
}

func article(t string) string {
	switch t {
	case "null":
		return "null"
	case "integer", "object", "array":
		return "an " + t
	default:
		return "a " + t
	}
}

func literal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func number(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func child(at []string, tok string) []string {
	return append(slices.Clip(at), tok)
}

func last(at []string) string {
	if len(at) == 0 {
		return ""
	}
	return at[len(at)-1]
}

// comparePaths orders pointers token by token, array indexes numerically.
func comparePaths(a, b []string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] == b[i] {
			continue
		}
		ai, aerr := strconv.Atoi(a[i])
		bi, berr := strconv.Atoi(b[i])
		if aerr == nil && berr == nil {
			return ai - bi
		}
		return strings.Compare(a[i], b[i])
	}
	return len(a) - len(b)
}
