package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/xemahq/xema/internal/capref"
	"github.com/xemahq/xema/internal/strictjson"
	"github.com/xemahq/xema/schemas"
)

// errOffline is what every attempt to fetch a schema by URL gets: validation never touches
// the network or the file system, so a $ref must resolve inside the document itself.
var errOffline = errors.New("only references inside the document are allowed (no network or file access)")

type offlineLoader struct{}

func (offlineLoader) Load(url string) (any, error) { return nil, errOffline }

type compiled struct {
	contribution, biome *jsonschema.Schema
}

// builtin compiles the embedded schemas once. They ship with the binary and are covered by
// tests, so failing to compile them is a programming error.
var builtin = sync.OnceValue(func() compiled {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(offlineLoader{})
	c.AssertFormat()
	for name, id := range schemas.IDs {
		data, err := fs.ReadFile(schemas.FS, name)
		if err != nil {
			panic(fmt.Sprintf("manifest: read embedded schema %s: %v", name, err))
		}
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(data)))
		if err != nil {
			panic(fmt.Sprintf("manifest: parse embedded schema %s: %v", name, err))
		}
		if err := c.AddResource(id, doc); err != nil {
			panic(fmt.Sprintf("manifest: add embedded schema %s: %v", name, err))
		}
	}
	return compiled{
		contribution: c.MustCompile(schemas.ContributionID),
		biome:        c.MustCompile(schemas.BiomeID),
	}
})

// validate checks v against sch and returns one Problem per failing leaf keyword, with
// pointers below prefix.
func validate(sch *jsonschema.Schema, file, prefix string, v any) []Problem {
	err := sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []Problem{{File: file, Path: prefix, Message: err.Error()}}
	}
	return leafProblems(ve, file, prefix, nil)
}

func leafProblems(ve *jsonschema.ValidationError, file, prefix string, out []Problem) []Problem {
	if alt := alternatives(ve, file, prefix); alt != nil {
		return append(out, *alt)
	}
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			out = leafProblems(c, file, prefix, out)
		}
		return out
	}
	loc := strictjson.Pointer(prefix, ve.InstanceLocation...)
	switch k := ve.ErrorKind.(type) {
	case *kind.Required:
		for _, f := range k.Missing {
			out = append(out, Problem{File: file, Path: loc, Message: "missing required field " + fieldName(f)})
		}
	case *kind.AdditionalProperties:
		for _, f := range k.Properties {
			out = append(out, Problem{File: file, Path: strictjson.Pointer(loc, f), Message: "unknown field " + fieldName(f)})
		}
	default:
		out = append(out, Problem{File: file, Path: loc, Message: phrase(ve)})
	}
	return out
}

// alternatives folds a failed anyOf/oneOf whose branches all complain about the same value
// into one Problem ("must be X or must be Y") instead of one per branch.
func alternatives(ve *jsonschema.ValidationError, file, prefix string) *Problem {
	switch ve.ErrorKind.(type) {
	case *kind.AnyOf, *kind.OneOf:
	default:
		return nil
	}
	leaves := leafProblems(&jsonschema.ValidationError{Causes: ve.Causes}, file, prefix, nil)
	if len(leaves) == 0 {
		return nil
	}
	msgs := make([]string, 0, len(leaves))
	for _, l := range leaves {
		if l.Path != leaves[0].Path {
			return nil
		}
		if !slices.Contains(msgs, l.Message) {
			msgs = append(msgs, l.Message)
		}
	}
	return &Problem{File: file, Path: leaves[0].Path, Message: strings.Join(msgs, " or ")}
}

var english = message.NewPrinter(language.English)

// phrase renders one leaf error as a short phrase about the value at its location.
func phrase(ve *jsonschema.ValidationError) string {
	switch k := ve.ErrorKind.(type) {
	case *kind.Type:
		return "must be " + typeNames(k.Want) + ", got " + k.Got
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = literal(w)
		}
		return "must be one of " + strings.Join(want, ", ")
	case *kind.Const:
		return "must be " + literal(k.Want)
	case *kind.Pattern:
		if what, ok := patternNames[k.Want]; ok {
			return "must be " + what + ", got " + quoteShort(k.Got)
		}
		return "must match " + k.Want + ", got " + quoteShort(k.Got)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters, got %d", k.Want, k.Got)
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d characters, got %d", k.Want, k.Got)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d entries, got %d", k.Want, k.Got)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d entries, got %d", k.Want, k.Got)
	case *kind.UniqueItems:
		return fmt.Sprintf("entries %d and %d are duplicates", k.Duplicates[0], k.Duplicates[1])
	case *kind.Minimum:
		return "must be at least " + k.Want.RatString() + ", got " + k.Got.RatString()
	case *kind.Maximum:
		return "must be at most " + k.Want.RatString() + ", got " + k.Got.RatString()
	case *kind.Format:
		return "must be a valid " + k.Want
	case *kind.Not:
		if n := len(ve.InstanceLocation); n > 0 && ve.InstanceLocation[n-1] == "biome" {
			return "must not be declared: provenance (biome id and version) is stamped from the discovering biome.json"
		}
		return "is not allowed here"
	case *kind.FalseSchema:
		return "is not allowed here"
	default:
		return ve.ErrorKind.LocalizedString(english)
	}
}

// patternNames phrases the schemas' long patterns for humans; keys are the patterns verbatim.
var patternNames = map[string]string{
	capref.Pattern:                  "a capability ref <domain>:<resource>.<verb>@<major> (e.g. kb:page.read@1)",
	`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`: "a lower-case slug (e.g. software-dev)",
	`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-((0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(\+([0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*))?$`: "a semantic version (e.g. 1.2.0)",
}

var article = map[string]string{
	"object": "an object", "array": "an array", "integer": "an integer", "string": "a string",
	"number": "a number", "boolean": "a boolean", "null": "null",
}

func typeNames(ts []string) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = article[t]
	}
	return strings.Join(names, " or ")
}

func literal(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

var plainName = regexp.MustCompile(`^[A-Za-z0-9_$.-]{1,64}$`)

// fieldName prints a field name bare when it is plain, quoted otherwise, so a hostile key
// cannot forge extra output lines.
func fieldName(s string) string {
	if plainName.MatchString(s) {
		return s
	}
	return quoteShort(s)
}

func quoteShort(s string) string {
	const limit = 64
	if r := []rune(s); len(r) > limit {
		return strconv.Quote(string(r[:limit])) + "…"
	}
	return strconv.Quote(s)
}
