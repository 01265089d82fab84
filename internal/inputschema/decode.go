package inputschema

import "github.com/xemahq/xema/internal/strictjson"

// maxDepth bounds the nesting of an input so that a hostile body cannot make
// decoding and validation recurse without limit.
const maxDepth = 512

// decodeInput decodes one invocation input strictly (see strictjson: numbers
// stay json.Number, duplicate properties, invalid UTF-8, excess nesting and
// trailing data are rejected) and words a rejection as one violation.
func decodeInput(input []byte) (any, *Violation) {
	v, err := strictjson.Decode(input, maxDepth)
	if err == nil {
		return v, nil
	}
	switch err.Kind {
	case strictjson.DuplicateKey:
		return nil, &Violation{Path: err.Path, Message: "duplicate property " + err.Key}
	case strictjson.TooDeep:
		return nil, &Violation{Path: err.Path, Message: err.Message}
	case strictjson.TrailingData:
		return nil, &Violation{Message: "malformed JSON: unexpected data after the top-level value"}
	default:
		return nil, &Violation{Message: "malformed JSON: " + err.Message}
	}
}
