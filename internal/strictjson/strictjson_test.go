package strictjson

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeRejects(t *testing.T) {
	const depth = 4
	tests := []struct {
		name string
		data string
		want Error
	}{
		{"empty", "", Error{Kind: Truncated, Offset: 0, Message: "unexpected end of input"}},
		{"truncated", "{\"a\": [1,\n", Error{Kind: Truncated, Offset: 10, Message: "unexpected end of input"}},
		{"not JSON", "kind: x", Error{Kind: Syntax, Offset: 0, Message: "invalid character 'k' looking for beginning of value"}},
		{"bad token", `{"kind": capability}`, Error{Kind: Syntax, Offset: 9, Message: "invalid character 'c' looking for beginning of value"}},
		{"trailing value", `{"a": 1} {}`, Error{Kind: TrailingData, Offset: 9, Message: "unexpected data after the JSON value"}},
		{"trailing garbage", "[1]\n x", Error{Kind: TrailingData, Offset: 5, Message: "unexpected data after the JSON value"}},
		{"invalid UTF-8", "{\"a\": \"b\xffc\"}", Error{Kind: InvalidUTF8, Offset: 8, Message: "not valid UTF-8"}},
		{"duplicate key", `{"a": {"b/c": 1, "b/c": 2}}`, Error{Kind: DuplicateKey, Path: "/a/b~1c", Key: "b/c", Offset: 22, Message: `duplicate key "b/c"`}},
		{"duplicate key in array", `[{}, {"x": 1, "y": {}, "x": 2}]`, Error{Kind: DuplicateKey, Path: "/1/x", Key: "x", Offset: 26, Message: `duplicate key "x"`}},
		{"duplicate hostile key", "{\"a\\n\": 1, \"a\\n\": 2}", Error{Kind: DuplicateKey, Path: "/a\n", Key: "a\n", Offset: 16, Message: `duplicate key "a\n"`}},
		{"too deep", strings.Repeat("[", depth+1) + strings.Repeat("]", depth+1), Error{Kind: TooDeep, Path: "/0/0/0/0", Offset: 4, Message: "nested deeper than 4 levels"}},
		{"too deep in object", `{"a": {"b": [[{"c": 1}]]}}`, Error{Kind: TooDeep, Path: "/a/b/0/0", Offset: 14, Message: "nested deeper than 4 levels"}},
		{"syntax error before excess depth", `[[[[ x [[]]]]]]`, Error{Kind: Syntax, Offset: 5, Message: "invalid character 'x' looking for beginning of value"}},
		{"far too deep for the decoder", strings.Repeat("[", 20000) + strings.Repeat("]", 20000), Error{Kind: TooDeep, Path: strings.Repeat("/0", depth), Offset: 4, Message: "nested deeper than 4 levels"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := Decode([]byte(tt.data), depth)
			if err == nil {
				t.Fatalf("Decode = %v, want an error", v)
			}
			if *err != tt.want {
				t.Fatalf("error\n got %#v\nwant %#v", *err, tt.want)
			}
		})
	}
}

func TestDecodeAccepts(t *testing.T) {
	tests := []struct {
		name string
		data string
		want any
	}{
		{"big integer kept exact", `{"n": 12345678901234567890123}`, map[string]any{"n": json.Number("12345678901234567890123")}},
		{"colons and quotes inside strings", `{"a:b": "c:\"d\":e", "f": ["g:h"]}`, map[string]any{"a:b": `c:"d":e`, "f": []any{"g:h"}}},
		{"same key in sibling objects", `[{"k": 1}, {"k": 2}]`, []any{map[string]any{"k": json.Number("1")}, map[string]any{"k": json.Number("2")}}},
		{"nested exactly to the limit", `[[[{"a": null}]]]`, []any{[]any{[]any{map[string]any{"a": nil}}}}},
		{"surrounding whitespace", " \n\t true \r\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.data), 4)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Decode = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestPointer(t *testing.T) {
	if got := Pointer("/a", "b/c", "d~e", ""); got != "/a/b~1c/d~0e/" {
		t.Fatalf("Pointer = %q", got)
	}
}

func TestLineColumn(t *testing.T) {
	data := []byte("{\n  \"a\": 1,\n  x\n}")
	tests := []struct {
		offset       int64
		line, column int
	}{
		{0, 1, 1}, {1, 1, 2}, {2, 2, 1}, {14, 3, 3}, {-5, 1, 1}, {1000, 4, 2},
	}
	for _, tt := range tests {
		if line, col := LineColumn(data, tt.offset); line != tt.line || col != tt.column {
			t.Errorf("LineColumn(%d) = %d:%d, want %d:%d", tt.offset, line, col, tt.line, tt.column)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"a": [1, {"b": "c:d"}]}`, `{"a": 1, "a": 2}`, `[[[[[[]]]]]]`, `"\u00e9"`, `{} x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Decode(data, 4)
		if err != nil {
			if err.Kind < InvalidUTF8 || err.Kind > TooDeep || err.Message == "" || err.Offset < 0 || err.Offset > int64(len(data)) {
				t.Fatalf("malformed error %#v", err)
			}
			return
		}
		// Accepted input is valid JSON whose re-encoding decodes to the same value.
		out, merr := json.Marshal(v)
		if merr != nil {
			t.Fatalf("marshal accepted value: %v", merr)
		}
		again, err := Decode(out, 4)
		if err != nil || !reflect.DeepEqual(v, again) {
			t.Fatalf("round trip of %q: %v, %#v != %#v", data, err, again, v)
		}
	})
}

// BenchmarkDecode measures the fast path (valid input) and the token-by-token
// path taken to locate a duplicate key.
func BenchmarkDecode(b *testing.B) {
	valid := []byte(`{"sourceBranch": "feature/x", "targetBranch": "main", "title": "Add user authentication", "description": "Adds login and logout.", "labels": ["a", "b"], "reviewers": [{"name": "bob", "required": true}]}`)
	duplicate := []byte(`{"sourceBranch": "feature/x", "targetBranch": "main", "title": "Add user authentication", "description": "Adds login and logout.", "labels": ["a", "b"], "reviewers": [{"name": "bob", "name": "eve"}]}`)
	for _, c := range []struct {
		name string
		data []byte
		ok   bool
	}{{"valid", valid, true}, {"duplicate", duplicate, false}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(c.data, 64); (err == nil) != c.ok {
					b.Fatal(err)
				}
			}
		})
	}
}
