package capref

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

func TestParseValid(t *testing.T) {
	tests := []struct {
		in   string
		want Ref
	}{
		{"kb:page.read@1", Ref{"kb", "page", "read", 1}},
		{"artifact:read@1", Ref{"artifact", "", "read", 1}},
		{"mcp-tool:invoke@1", Ref{"mcp-tool", "", "invoke", 1}},
		{"connector:tracker.issue.create@1", Ref{"connector", "tracker.issue", "create", 1}},
		{"connector:scm.create-pull-request@1", Ref{"connector", "scm", "create-pull-request", 1}},
		{"biome:submit-to-store@1", Ref{"biome", "", "submit-to-store", 1}},
		{"store:biome.list@2", Ref{"store", "biome", "list", 2}},
		{"a:b@0", Ref{"a", "", "b", 0}},
		{"a-:b-.c-@10", Ref{"a-", "b-", "c-", 10}},
		{"x1:y2.z3@9223372036854775807", Ref{"x1", "y2", "z3", 9223372036854775807}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			if s := got.String(); s != tt.in {
				t.Fatalf("String() = %q, want %q", s, tt.in)
			}
		})
	}
}

func TestParseInvalid(t *testing.T) {
	tests := []struct {
		in, why string
	}{
		{"", "empty"},
		{"kb:page.read", "no major"},
		{"kb:page.read@", "empty major"},
		{"kb:page.read@v1", "non-digit major"},
		{"kb:page.read@-1", "negative major"},
		{"kb:page.read@1.0", "dotted major"},
		{"kb:page.read@01", "leading zero"},
		{"kb:page.read@00", "leading zeros"},
		{"kb:page.read@9223372036854775808", "major overflows int64"},
		{"kb:page.read@99999999999999999999999", "major overflows"},
		{"Kb:page.read@1", "upper-case domain"},
		{"kb:Page.read@1", "upper-case resource"},
		{"1kb:page.read@1", "domain starts with digit"},
		{"-kb:page.read@1", "domain starts with hyphen"},
		{"kb:1page.read@1", "resource starts with digit"},
		{"kb:page..read@1", "empty segment"},
		{"kb:.read@1", "leading dot"},
		{"kb:page.@1", "trailing dot"},
		{"kb:@1", "empty path"},
		{":page.read@1", "empty domain"},
		{"kbpage.read@1", "no colon"},
		{"kb:page:read@1", "two colons"},
		{"kb:page_read@1", "underscore"},
		{"kb:page.read@1@2", "two majors"},
		{" kb:page.read@1", "leading space"},
		{"kb:page.read@1\n", "trailing newline"},
		{"kb:page.read@١", "non-ASCII digit"},
		{"kb:pagé.read@1", "non-ASCII letter"},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			r, err := Parse(tt.in)
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want error (%s)", tt.in, r, tt.why)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrInvalid", tt.in, err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.in)) {
				t.Fatalf("error %q does not name the input", err)
			}
		})
	}
}

func TestPatternIsTheSpecGrammar(t *testing.T) {
	const spec = `^[a-z][a-z0-9-]*:[a-z][a-z0-9-]*(\.[a-z][a-z0-9-]*)*@\d+$`
	if Pattern != spec {
		t.Fatalf("Pattern = %s, want the spec grammar %s", Pattern, spec)
	}
}

func TestMustParsePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("MustParse of an invalid ref did not panic")
		}
	}()
	MustParse("not a ref")
}

var specGrammar = regexp.MustCompile(Pattern)

func FuzzParse(f *testing.F) {
	for _, s := range []string{"kb:page.read@1", "artifact:read@1", "mcp-tool:invoke@1",
		"connector:tracker.issue.create@1", "a:b@0", "kb:page.read@01", "x:y@99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			return
		}
		if !specGrammar.MatchString(s) {
			t.Fatalf("Parse accepted %q, which does not match the spec grammar", s)
		}
		if got := r.String(); got != s {
			t.Fatalf("round trip: Parse(%q).String() = %q", s, got)
		}
		again, err := Parse(r.String())
		if err != nil || again != r {
			t.Fatalf("re-parse of %q: %+v, %v", s, again, err)
		}
	})
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("connector:tracker.issue.create@1"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkString(b *testing.B) {
	r := MustParse("connector:tracker.issue.create@1")
	b.ReportAllocs()
	for b.Loop() {
		_ = r.String()
	}
}
