package manifest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const validBiome = "testdata/valid/biome.json"

func TestParseBiomeValid(t *testing.T) {
	b, problems := ParseBiome(BiomeFile, readTestdata(t, validBiome))
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	if b.ID != "software-dev" || b.Version != "1.2.0" || b.DefaultProfile != "internal-agent" || len(b.RequiresCapabilities) != 3 {
		t.Fatalf("biome not decoded: %+v", b)
	}
	if len(b.Contributions) != 1 {
		t.Fatalf("want the inline contribution, got %d", len(b.Contributions))
	}
	c := b.Contributions[0]
	if c.Manifest.Ref != "artifact:read@1" || c.Source != BiomeFile || c.SourcePath != "/xema/contributions/inline/0" {
		t.Fatalf("inline contribution: %+v", c)
	}
}

// An inline entry is exactly a contribution file's content: the same bytes in either
// place yield the identical Contribution.
func TestInlineAndFileContributionsAreIdentical(t *testing.T) {
	b, problems := ParseBiome(BiomeFile, readTestdata(t, validBiome))
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	inline := b.Contributions[0]
	entry := extractInline(t, readTestdata(t, validBiome))
	fromFile, problems := ParseContribution("contributions/artifact.capability.contribution.json", entry)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	inline.Source, inline.SourcePath = "", ""
	fromFile.Source = ""
	if !reflect.DeepEqual(inline, fromFile) {
		t.Fatalf("inline %+v\nfile   %+v", inline, fromFile)
	}
}

// TestBiomeFieldRules breaks one rule of biome.json per case.
func TestBiomeFieldRules(t *testing.T) {
	hints := func(caps ...string) []any {
		out := make([]any, len(caps))
		for i, c := range caps {
			out[i] = map[string]any{"capability": c, "reason": "r"}
		}
		return out
	}
	tests := []struct {
		name  string
		edits []edit
		path  string
		msg   string
	}{
		{"not an object", []edit{set("", "x")}, "", "must be an object, got string"},
		{"id missing", []edit{del("/id")}, "", "missing required field id"},
		{"id not a slug", []edit{set("/id", "Software_Dev")}, "/id", "must be a lower-case slug"},
		{"id too long", []edit{set("/id", strings.Repeat("a", 65))}, "/id", "must be at most 64 characters"},
		{"version missing", []edit{del("/version")}, "", "missing required field version"},
		{"version not semver", []edit{set("/version", "1.2")}, "/version", "must be a semantic version"},
		{"version leading v", []edit{set("/version", "v1.2.0")}, "/version", "must be a semantic version"},
		{"version not a string", []edit{set("/version", 1)}, "/version", "must be a string, got number"},
		{"requiresCapabilities missing", []edit{del("/requiresCapabilities")}, "", "missing required field requiresCapabilities"},
		{"requiresCapabilities not an array", []edit{set("/requiresCapabilities", "kb:page.read@1")}, "/requiresCapabilities", "must be an array, got string"},
		{"required ref invalid", []edit{set("/requiresCapabilities/2", "kb:page.read")}, "/requiresCapabilities/2", "must be a capability ref"},
		{"required ref leading zero", []edit{set("/requiresCapabilities/2", "kb:page.read@01"), set("/permissionHints/2/capability", "kb:page.read@01")}, "/requiresCapabilities/2", "leading zeros"},
		{"required ref duplicate", []edit{set("/requiresCapabilities/2", "artifact:read@1"), set("/permissionHints", hints("connector:scm.create-pull-request@1", "artifact:read@1"))}, "/requiresCapabilities", "entries 1 and 2 are duplicates"},
		{"permissionHints missing", []edit{del("/permissionHints")}, "", "missing required field permissionHints"},
		{"hint capability missing", []edit{del("/permissionHints/2/capability")}, "/permissionHints/2", "missing required field capability"},
		{"hint reason missing", []edit{del("/permissionHints/2/reason")}, "/permissionHints/2", "missing required field reason"},
		{"hint reason empty", []edit{set("/permissionHints/2/reason", "")}, "/permissionHints/2/reason", "must be at least 1 characters"},
		{"hint reason too long", []edit{set("/permissionHints/2/reason", strings.Repeat("a", 1001))}, "/permissionHints/2/reason", "must be at most 1000 characters"},
		{"hint unknown field", []edit{set("/permissionHints/2/why", "x")}, "/permissionHints/2/why", "unknown field why"},
		{"hint for a capability not required", []edit{set("/permissionHints", hints("connector:scm.create-pull-request@1", "artifact:read@1", "kb:page.read@1", "kb:page.write@1"))}, "/permissionHints/3/capability", "kb:page.write@1 is not in requiresCapabilities"},
		{"required capability without hint", []edit{set("/permissionHints", hints("connector:scm.create-pull-request@1", "artifact:read@1"))}, "/requiresCapabilities/2", "no permissionHints entry for kb:page.read@1"},
		{"duplicate hint", []edit{set("/permissionHints", hints("connector:scm.create-pull-request@1", "artifact:read@1", "kb:page.read@1", "kb:page.read@1"))}, "/permissionHints/3/capability", "duplicate permission hint for kb:page.read@1"},
		{"defaultProfile missing", []edit{del("/defaultProfile")}, "", "missing required field defaultProfile"},
		{"defaultProfile unknown", []edit{set("/defaultProfile", "admin")}, "/defaultProfile", "must be one of read-only-assistant, support-chatbot, internal-agent, connector-bridge, unrestricted"},
		{"unknown field", []edit{set("/name", "x")}, "/name", "unknown field name"},
		{"xema not an object", []edit{set("/xema", []any{})}, "/xema", "must be an object, got array"},
		{"xema unknown field", []edit{set("/xema/policies", []any{})}, "/xema/policies", "unknown field policies"},
		{"xema.contributions unknown field", []edit{set("/xema/contributions/files", []any{})}, "/xema/contributions/files", "unknown field files"},
		{"inline not an array", []edit{set("/xema/contributions/inline", map[string]any{})}, "/xema/contributions/inline", "must be an array, got object"},
		{"inline entry rule", []edit{set("/xema/contributions/inline/0/manifest/riskTier", "extreme")}, "/xema/contributions/inline/0/manifest/riskTier", "must be one of low, medium, high, critical"},
		{"inline entry provenance", []edit{set("/xema/contributions/inline/0/manifest/biome", map[string]any{"id": "x"})}, "/xema/contributions/inline/0/manifest/biome", "provenance"},
		{"inline entry bad inputSchema", []edit{set("/xema/contributions/inline/0/manifest/inputSchema/$ref", "#/nope")}, "/xema/contributions/inline/0/manifest/inputSchema", "unresolvable $ref #/nope"},
		{"inline entry leading-zero ref", []edit{set("/xema/contributions/inline/0/manifest/ref", "artifact:read@01")}, "/xema/contributions/inline/0/manifest/ref", "leading zeros"},
		{"inline ref not required", []edit{set("/xema/contributions/inline/0/manifest/ref", "artifact:write@1")}, "/xema/contributions/inline/0/manifest/ref", "artifact:write@1 is not in biome.json requiresCapabilities"},
		{"inline entry integer as 1.0", []edit{set("/xema/contributions/inline/0/invocation", map[string]any{"kind": "http", "url": "http://x", "timeoutMs": json.Number("5.0")})}, "/xema/contributions/inline/0/invocation/timeoutMs", "must be an integer"},
	}
	base := readTestdata(t, validBiome)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, problems := ParseBiome(BiomeFile, apply(t, base, tt.edits...))
			if len(problems) != 1 {
				t.Fatalf("want exactly one problem at %q (%s), got %d: %v", tt.path, tt.msg, len(problems), problems)
			}
			p := problems[0]
			if p.File != BiomeFile || p.Path != tt.path || !strings.Contains(p.Message, tt.msg) {
				t.Fatalf("got %v, want biome.json: %s: ...%s...", p, tt.path, tt.msg)
			}
			if b != nil {
				t.Fatal("invalid biome returned a value")
			}
		})
	}
}

func TestCheckAcrossFiles(t *testing.T) {
	biome := File{Name: BiomeFile, Data: readTestdata(t, validBiome)}
	pr := File{Name: "contributions/open-pr.capability.contribution.json", Data: readTestdata(t, validFile)}
	prAgain := File{Name: "contributions/open-pr-2.capability.contribution.json", Data: pr.Data}
	artifact := File{Name: "contributions/artifact.capability.contribution.json", Data: extractInline(t, biome.Data)}
	stray := File{Name: "contributions/stray.capability.contribution.json", Data: apply(t, pr.Data, set("/manifest/ref", "kb:page.write@1"))}

	b, problems := Check(biome, []File{pr})
	if len(problems) > 0 || len(b.Contributions) != 2 || b.Contributions[0].Source != pr.Name || b.Contributions[1].Source != BiomeFile {
		t.Fatalf("valid biome: %v %+v", problems, b)
	}

	tests := []struct {
		name  string
		files []File
		want  []string
	}{
		{"duplicate across files", []File{pr, prAgain}, []string{
			"contributions/open-pr-2.capability.contribution.json: /manifest/ref: duplicate ref connector:scm.create-pull-request@1: also contributed by contributions/open-pr.capability.contribution.json"}},
		{"duplicate between file and inline", []File{artifact}, []string{
			"biome.json: /xema/contributions/inline/0/manifest/ref: duplicate ref artifact:read@1: also contributed by contributions/artifact.capability.contribution.json"}},
		{"ref not required", []File{stray}, []string{
			"contributions/stray.capability.contribution.json: /manifest/ref: kb:page.write@1 is not in biome.json requiresCapabilities"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, problems := Check(biome, tt.files)
			if b != nil || len(problems) != len(tt.want) {
				t.Fatalf("got %v, want %v", problems, tt.want)
			}
			for i, w := range tt.want {
				if problems[i].String() != w {
					t.Errorf("problem %d = %q, want %q", i, problems[i], w)
				}
			}
		})
	}
}

func TestLoadDirValid(t *testing.T) {
	b, problems, err := LoadDir("testdata/valid")
	if err != nil || len(problems) > 0 {
		t.Fatalf("LoadDir: %v %v", err, problems)
	}
	refs := []string{b.Contributions[0].Manifest.Ref, b.Contributions[1].Manifest.Ref}
	if !reflect.DeepEqual(refs, []string{"connector:scm.create-pull-request@1", "artifact:read@1"}) {
		t.Fatalf("contributions: %v", refs)
	}
}

func TestLoadDirBroken(t *testing.T) {
	b, problems, err := LoadDir("testdata/broken")
	if err != nil || b != nil {
		t.Fatalf("LoadDir: %v %v", b, err)
	}
	want := readTestdata(t, "testdata/broken.golden")
	var got strings.Builder
	for _, p := range problems {
		got.WriteString(p.String() + "\n")
	}
	if got.String() != string(want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", got.String(), want)
	}
}

func TestLoadDirLayout(t *testing.T) {
	write := func(t *testing.T, dir, name string, data []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	biome := readTestdata(t, validBiome)
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"missing biome.json", func(t *testing.T, dir string) {}, "biome.json: missing"},
		{"biome.json is a directory", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, BiomeFile), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "biome.json: not a regular file"},
		{"contributions is a file", func(t *testing.T, dir string) {
			write(t, dir, BiomeFile, biome)
			write(t, dir, "contributions", []byte("x"))
		}, "contributions: cannot read directory"},
		{"wrong file name", func(t *testing.T, dir string) {
			write(t, dir, BiomeFile, biome)
			write(t, dir, "contributions/open-pr.json", readTestdata(t, validFile))
		}, "contributions/open-pr.json: unexpected entry"},
		{"sub-directory", func(t *testing.T, dir string) {
			write(t, dir, BiomeFile, biome)
			write(t, dir, "contributions/x.capability.contribution.json/y", nil)
		}, "contributions/x.capability.contribution.json: unexpected entry"},
		{"file too large", func(t *testing.T, dir string) {
			write(t, dir, BiomeFile, append(biome, make([]byte, MaxFileSize)...))
		}, "biome.json: larger than"},
		{"non-JSON biome.json", func(t *testing.T, dir string) {
			write(t, dir, BiomeFile, []byte("id: software-dev\n"))
		}, "biome.json: invalid JSON at line 1, column 1 (offset 0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			b, problems, err := LoadDir(dir)
			if err != nil || b != nil || len(problems) != 1 || !strings.HasPrefix(problems[0].String(), tt.want) {
				t.Fatalf("got %v %v, want one problem %q", err, problems, tt.want)
			}
		})
	}
	if _, _, err := LoadDir(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("LoadDir of a missing directory: no error")
	}
}
