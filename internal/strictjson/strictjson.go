// Package strictjson decodes one JSON document strictly and says where it is not:
// valid UTF-8, no duplicate object keys (whose last-wins resolution differs between
// parsers), bounded nesting and nothing after the value. Numbers stay json.Number so
// nothing is rounded through float64.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Kind is what made a document unacceptable.
type Kind int

const (
	InvalidUTF8  Kind = iota + 1 // the bytes are not UTF-8
	Syntax                       // not JSON
	Truncated                    // the input ends inside the value
	TrailingData                 // something follows the value
	DuplicateKey                 // an object names one key twice
	TooDeep                      // nested deeper than the limit
)

// Error says why a document was rejected and where.
type Error struct {
	Kind Kind
	// Path is an RFC 6901 JSON pointer to the offending value ("" is the document);
	// only DuplicateKey and TooDeep locate one.
	Path string
	// Key is the repeated key of a DuplicateKey error.
	Key string
	// Offset is the byte offset in the input where the problem was found.
	Offset int64
	// Message says what is wrong, without the location: "not valid UTF-8",
	// `duplicate key "k"`, the decoder's description of a syntax error...
	Message string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("%s (offset %d)", e.Message, e.Offset)
	}
	return fmt.Sprintf("%s: %s (offset %d)", e.Path, e.Message, e.Offset)
}

// Decode parses data as one JSON value nested at most maxDepth levels.
//
// The common case takes one json.Decoder.Decode and a byte scan; only a suspect
// document (more property names in the text than in the decoded value, or too
// deep) is decoded again token by token to say where.
func Decode(data []byte, maxDepth int) (any, *Error) {
	if !utf8.Valid(data) {
		return nil, &Error{Kind: InvalidUTF8, Offset: invalidUTF8Offset(data), Message: "not valid UTF-8"}
	}
	names, depth := scan(data)
	if depth <= maxDepth { // a deeper document goes straight to locate, which names the path
		v, err := decodeWhole(data)
		if err != nil {
			return nil, err
		}
		if names == countNames(v) {
			return v, nil
		}
	}
	return nil, locate(data, maxDepth)
}

// decodeWhole decodes data in one call, checking only syntax and trailing data.
func decodeWhole(data []byte) (any, *Error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, syntaxError(data, d, err)
	}
	end := d.InputOffset()
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		start := end + int64(len(data[end:])-len(bytes.TrimLeft(data[end:], " \t\r\n")))
		return nil, &Error{Kind: TrailingData, Offset: start, Message: "unexpected data after the JSON value"}
	}
	return v, nil
}

// locate decodes data token by token to find the first duplicate key or excess
// nesting and say where it is. It is only called for a document known to have one
// of them (or a syntax error before them), so it always returns an error.
func locate(data []byte, maxDepth int) *Error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := walk(d, nil, maxDepth); err != nil {
		if e, ok := err.(*Error); ok {
			return e
		}
		return syntaxError(data, d, err)
	}
	// Unreachable while scan and the decoder agree; fail closed if they ever do not.
	return &Error{Kind: DuplicateKey, Message: "duplicate key"}
}

// walk reads the value at path, returning an *Error for a duplicate key or excess
// nesting and the decoder's error otherwise.
func walk(d *json.Decoder, path []string, maxDepth int) error {
	tok, err := d.Token()
	if err != nil {
		return err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if len(path) >= maxDepth {
		return &Error{Kind: TooDeep, Path: Pointer("", path...), Offset: d.InputOffset() - 1, Message: fmt.Sprintf("nested deeper than %d levels", maxDepth)}
	}
	switch delim {
	case '{':
		seen := map[string]bool{}
		for d.More() {
			tok, err := d.Token()
			if err != nil {
				return err
			}
			key, _ := tok.(string) // the decoder only yields strings as object keys
			if seen[key] {
				return &Error{Kind: DuplicateKey, Path: Pointer("", append(path, key)...), Key: key, Offset: d.InputOffset(), Message: "duplicate key " + strconv.Quote(key)}
			}
			seen[key] = true
			if err := walk(d, append(path, key), maxDepth); err != nil {
				return err
			}
		}
	default: // '[': the decoder never yields a closing delimiter here
		for i := 0; d.More(); i++ {
			if err := walk(d, append(path, strconv.Itoa(i)), maxDepth); err != nil {
				return err
			}
		}
	}
	_, err = d.Token() // the closing delimiter
	return err
}

// syntaxError turns a decoder error into a Syntax or Truncated error.
func syntaxError(data []byte, d *json.Decoder, err error) *Error {
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &Error{Kind: Truncated, Offset: int64(len(data)), Message: "unexpected end of input"}
	case errors.As(err, &se):
		// A streaming decoder's offsets can be approximate; a one-shot scan pins the byte.
		var exact *json.SyntaxError
		if errors.As(json.Unmarshal(data, new(any)), &exact) {
			se = exact
		}
		// Offset counts the bytes read, the offending one included.
		return &Error{Kind: Syntax, Offset: se.Offset - 1, Message: se.Error()}
	default:
		return &Error{Kind: Syntax, Offset: d.InputOffset(), Message: err.Error()}
	}
}

// scan counts the property names of a well-formed JSON text (every ':' outside a
// string separates one) and measures its nesting depth.
func scan(data []byte) (names, maxDepth int) {
	depth, inString, escaped := 0, false, false
	for _, c := range data {
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

func invalidUTF8Offset(data []byte) int64 {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			return int64(i)
		}
		i += n
	}
	return int64(len(data))
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// Pointer appends reference tokens to the JSON pointer base, escaping them per
// RFC 6901.
func Pointer(base string, tokens ...string) string {
	if len(tokens) == 0 {
		return base
	}
	var b strings.Builder
	b.WriteString(base)
	for _, t := range tokens {
		b.WriteByte('/')
		if strings.ContainsAny(t, "~/") { // rare: escaping allocates, plain names need not
			t = pointerEscaper.Replace(t)
		}
		b.WriteString(t)
	}
	return b.String()
}

// LineColumn locates a byte offset as a 1-based line and column (in bytes), for
// people reading the file in an editor.
func LineColumn(data []byte, offset int64) (line, column int) {
	offset = min(max(offset, 0), int64(len(data)))
	before := data[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	column = int(offset) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, column
}
