package manifest

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// edit is one JSON mutation: set the value at Path (creating the last key or replacing an
// array entry), or delete it when Delete is set.
type edit struct {
	Path   string
	Value  any
	Delete bool
}

func set(path string, v any) edit { return edit{Path: path, Value: v} }
func del(path string) edit        { return edit{Path: path, Delete: true} }

// apply returns base with the edits applied, re-encoded as JSON.
func apply(t testing.TB, base []byte, edits ...edit) []byte {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(base))
	d.UseNumber()
	var doc any
	if err := d.Decode(&doc); err != nil {
		t.Fatalf("decode base: %v", err)
	}
	for _, e := range edits {
		doc = applyOne(t, doc, e)
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return out
}

func applyOne(t testing.TB, doc any, e edit) any {
	t.Helper()
	if e.Path == "" {
		return e.Value
	}
	tokens := strings.Split(e.Path[1:], "/")
	parent := doc
	for _, tok := range tokens[:len(tokens)-1] {
		parent = child(t, parent, tok, e.Path)
	}
	last := tokens[len(tokens)-1]
	switch p := parent.(type) {
	case map[string]any:
		if e.Delete {
			delete(p, last)
		} else {
			p[last] = e.Value
		}
	case []any:
		i, err := strconv.Atoi(last)
		if err != nil || i >= len(p) || e.Delete {
			t.Fatalf("edit %s: only replacing an existing array entry is supported", e.Path)
		}
		p[i] = e.Value
	default:
		t.Fatalf("edit %s: parent is not a container", e.Path)
	}
	return doc
}

func child(t testing.TB, v any, tok, path string) any {
	t.Helper()
	switch c := v.(type) {
	case map[string]any:
		if x, ok := c[tok]; ok {
			return x
		}
	case []any:
		if i, err := strconv.Atoi(tok); err == nil && i < len(c) {
			return c[i]
		}
	}
	t.Fatalf("edit %s: no %q in the base document", path, tok)
	return nil
}
