package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// maxDepth bounds nesting so a hostile file cannot exhaust the stack; real manifests and
// their JSON Schemas stay far below it.
const maxDepth = 128

// decodeJSON parses one JSON document strictly: valid UTF-8, no duplicate object keys
// (whose last-wins resolution differs between parsers), no trailing data. Numbers are
// json.Number so nothing is rounded. The problem, if any, names the location.
func decodeJSON(file string, data []byte) (any, *Problem) {
	if !utf8.Valid(data) {
		off := invalidUTF8Offset(data)
		return nil, &Problem{File: file, Message: "not valid UTF-8 at " + position(data, off)}
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := decodeValue(d, "", 0)
	if err == nil {
		if _, terr := d.Token(); terr != io.EOF {
			err = &decodeError{offset: d.InputOffset(), msg: "unexpected data after the JSON value"}
		}
	}
	if err != nil {
		return nil, describe(file, data, d, err)
	}
	return v, nil
}

type decodeError struct {
	path   string
	offset int64
	msg    string
}

func (e *decodeError) Error() string { return e.msg }

func decodeValue(d *json.Decoder, path string, depth int) (any, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	if depth >= maxDepth {
		return nil, &decodeError{path: path, offset: d.InputOffset(), msg: fmt.Sprintf("nested deeper than %d levels", maxDepth)}
	}
	switch delim {
	case '{':
		obj := map[string]any{}
		for d.More() {
			kt, err := d.Token()
			if err != nil {
				return nil, err
			}
			key := kt.(string) // the decoder only yields string keys inside an object
			if _, dup := obj[key]; dup {
				return nil, &decodeError{path: pointer(path, key), offset: d.InputOffset(), msg: "duplicate key " + fieldName(key)}
			}
			v, err := decodeValue(d, pointer(path, key), depth+1)
			if err != nil {
				return nil, err
			}
			obj[key] = v
		}
		_, err := d.Token() // '}'
		return obj, err
	default: // '['
		arr := []any{}
		for d.More() {
			v, err := decodeValue(d, pointer(path, strconv.Itoa(len(arr))), depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := d.Token() // ']'
		return arr, err
	}
}

func describe(file string, data []byte, d *json.Decoder, err error) *Problem {
	var de *decodeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &de):
		return &Problem{File: file, Path: de.path, Message: de.msg + " at " + position(data, de.offset)}
	case errors.As(err, &se):
		// The streaming decoder's offsets are approximate; a one-shot scan pins the byte.
		var exact *json.SyntaxError
		if errors.As(json.Unmarshal(data, new(any)), &exact) {
			se = exact
		}
		// Offset counts the bytes read, the offending one included.
		return &Problem{File: file, Message: "invalid JSON at " + position(data, se.Offset-1) + ": " + se.Error()}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &Problem{File: file, Message: "truncated JSON: unexpected end of input at " + position(data, int64(len(data)))}
	default:
		return &Problem{File: file, Message: "invalid JSON at " + position(data, d.InputOffset()) + ": " + err.Error()}
	}
}

// position renders a byte offset as "line L, column C (offset N)", 1-based.
func position(data []byte, offset int64) string {
	offset = min(max(offset, 0), int64(len(data)))
	before := data[:offset]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(offset) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return fmt.Sprintf("line %d, column %d (offset %d)", line, col, offset)
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
