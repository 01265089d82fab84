package manifest

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/strictjson"
)

func TestBadJSON(t *testing.T) {
	tests := []struct {
		name, data, path, msg string
	}{
		{"empty", "", "", "truncated JSON: unexpected end of input at line 1, column 1 (offset 0)"},
		{"truncated", "{\"kind\": \"capability\",\n \"manifest\": {", "", "truncated JSON: unexpected end of input at line 2, column 15 (offset 37)"},
		{"not JSON", "kind: capability", "", "invalid JSON at line 1, column 1 (offset 0)"},
		{"bad token", "{\"kind\": capability}", "", "invalid JSON at line 1, column 10 (offset 9)"},
		{"trailing data", `{"kind": "capability"} {}`, "", "unexpected data after the JSON value"},
		{"duplicate key", `{"kind": "capability", "manifest": {"ref": "a:b@1", "ref": "c:d@1"}}`, "/manifest/ref", "duplicate key ref"},
		{"invalid UTF-8", "{\"kind\": \"cap\xffability\"}", "", "not valid UTF-8 at line 1, column 14 (offset 13)"},
		{"too deep", strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), strings.Repeat("/0", maxDepth), "nested deeper than 128 levels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, problems := ParseContribution("x.json", []byte(tt.data))
			if len(problems) != 1 || problems[0].File != "x.json" || problems[0].Path != tt.path || !strings.Contains(problems[0].Message, tt.msg) {
				t.Fatalf("got %v, want x.json: %s: ...%s...", problems, tt.path, tt.msg)
			}
		})
	}
}

func TestPointerEscaping(t *testing.T) {
	if got := strictjson.Pointer("/a", "b/c", "d~e", ""); got != "/a/b~1c/d~0e/" {
		t.Fatalf("pointer = %q", got)
	}
	_, problems := ParseContribution("x.json", []byte(`{"kind": "capability", "a/b~c": 1, "manifest": {}}`))
	for _, p := range problems {
		if p.Path == "/a~1b~0c" && p.Message == `unknown field "a/b~c"` {
			return
		}
	}
	t.Fatalf("no escaped pointer for the unknown field: %v", problems)
}

func FuzzParseContribution(f *testing.F) {
	f.Add(readTestdata(f, validFile))
	f.Add([]byte(minimal))
	f.Add(extractInline(f, readTestdata(f, validBiome)))
	f.Add(readTestdata(f, "testdata/broken/contributions/open-pr.capability.contribution.json"))
	f.Add([]byte(`{"kind":"capability","manifest":{"humanBaseline":{"kind":"org-administrators","environments":[]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, problems := ParseContribution("f.json", data)
		if len(problems) > 0 {
			for _, p := range problems {
				if p.File != "f.json" || p.Message == "" || (p.Path != "" && p.Path[0] != '/') {
					t.Fatalf("malformed problem %#v", p)
				}
			}
			return
		}
		// A valid result encodes back to a contribution that validates to the same value.
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("marshal a valid contribution: %v", err)
		}
		again, problems := ParseContribution("f.json", out)
		if len(problems) > 0 {
			t.Fatalf("re-validation of %s failed: %v", out, problems)
		}
		if !reflect.DeepEqual(c, again) {
			t.Fatalf("round trip changed the contribution:\n%+v\n%+v", c, again)
		}
	})
}

func BenchmarkParseContribution(b *testing.B) {
	data := readTestdata(b, validFile)
	b.ReportAllocs()
	for b.Loop() {
		if _, problems := ParseContribution("c.json", data); len(problems) > 0 {
			b.Fatal(problems)
		}
	}
}

func BenchmarkLoadDir(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, problems, err := LoadDir("testdata/valid"); err != nil || len(problems) > 0 {
			b.Fatal(err, problems)
		}
	}
}
