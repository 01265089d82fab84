package manifest

import (
	"fmt"

	"github.com/xemahq/xema/internal/strictjson"
)

// maxDepth bounds nesting so a hostile file cannot exhaust the stack; real manifests and
// their JSON Schemas stay far below it.
const maxDepth = 128

// decodeJSON parses one JSON document strictly (see strictjson); the problem, if any,
// names the file, the line and column, and the pointer when there is one.
func decodeJSON(file string, data []byte) (any, *Problem) {
	v, err := strictjson.Decode(data, maxDepth)
	if err == nil {
		return v, nil
	}
	line, col := strictjson.LineColumn(data, err.Offset)
	at := fmt.Sprintf("line %d, column %d (offset %d)", line, col, err.Offset)
	var msg string
	switch err.Kind {
	case strictjson.Syntax:
		msg = "invalid JSON at " + at + ": " + err.Message
	case strictjson.Truncated:
		msg = "truncated JSON: " + err.Message + " at " + at
	case strictjson.DuplicateKey:
		msg = "duplicate key " + fieldName(err.Key) + " at " + at
	default:
		msg = err.Message + " at " + at
	}
	return nil, &Problem{File: file, Path: err.Path, Message: msg}
}
