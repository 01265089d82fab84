package inputschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// maxDepth bounds the nesting of an input so that a hostile body cannot make
// decoding and validation recurse without limit.
const maxDepth = 512

// decodeError is why an input could not be decoded, and where.
type decodeError struct {
	path    []string
	message string
}

// decodeInput decodes one JSON value strictly: numbers stay json.Number (a big
// integer is not rounded through float64), a duplicate property is an error
// (encoding/json would silently keep the last one, while another parser down
// the line may keep the first), and so are invalid UTF-8 (encoding/json
// would silently replace it), nesting deeper than maxDepth and anything after
// the value.
//
// The common case takes one json.Decoder.Decode and a byte scan; only a
// suspect input (more property names in the text than in the decoded value,
// or too deep) is decoded again token by token to say where.
func decodeInput(input []byte) (any, *decodeError) {
	if !utf8.Valid(input) {
		return nil, &decodeError{message: "malformed JSON: not valid UTF-8"}
	}
	d := json.NewDecoder(bytes.NewReader(input))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, malformed(err)
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, &decodeError{message: "malformed JSON: unexpected data after the top-level value"}
	}
	names, depth := scanNames(input)
	if depth <= maxDepth && names == countNames(v) {
		return v, nil
	}
	d = json.NewDecoder(bytes.NewReader(input))
	d.UseNumber()
	if _, derr := decodeValue(d, nil); derr != nil {
		return nil, derr
	}
	return nil, &decodeError{message: "malformed JSON: duplicate property"} // unreachable: the scan and decode disagree
}

// scanNames counts the property names of a well-formed JSON text (every ':'
// outside a string separates one) and measures its nesting depth.
func scanNames(input []byte) (names, maxDepth int) {
	depth, inString, escaped := 0, false, false
	for _, c := range input {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ':':
			names++
		case c == '{' || c == '[':
			depth++
			maxDepth = max(maxDepth, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return names, maxDepth
}

// countNames counts the properties of every object in a decoded value.
func countNames(v any) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		n += len(v)
		for _, e := range v {
			n += countNames(e)
		}
	case []any:
		for _, e := range v {
			n += countNames(e)
		}
	}
	return n
}

// decodeValue decodes the value at path token by token, to find the first
// duplicate property or excess nesting and say where it is.
func decodeValue(d *json.Decoder, path []string) (any, *decodeError) {
	tok, err := d.Token()
	if err != nil {
		return nil, malformed(err)
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	if len(path) >= maxDepth {
		return nil, &decodeError{path: path, message: fmt.Sprintf("nested deeper than %d levels", maxDepth)}
	}
	switch delim {
	case '{':
		obj := map[string]any{}
		for d.More() {
			tok, err := d.Token()
			if err != nil {
				return nil, malformed(err)
			}
			name, _ := tok.(string) // the decoder only yields strings as object keys
			if _, dup := obj[name]; dup {
				return nil, &decodeError{path: append(path, name), message: "duplicate property " + name}
			}
			v, derr := decodeValue(d, append(path, name))
			if derr != nil {
				return nil, derr
			}
			obj[name] = v
		}
		if _, err := d.Token(); err != nil {
			return nil, malformed(err)
		}
		return obj, nil
	default: // '[': the decoder never yields a closing delimiter here
		arr := []any{}
		for d.More() {
			v, derr := decodeValue(d, append(path, strconv.Itoa(len(arr))))
			if derr != nil {
				return nil, derr
			}
			arr = append(arr, v)
		}
		if _, err := d.Token(); err != nil {
			return nil, malformed(err)
		}
		return arr, nil
	}
}

func malformed(err error) *decodeError {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &decodeError{message: "malformed JSON: unexpected end of input"}
	}
	return &decodeError{message: "malformed JSON: " + err.Error()}
}
