package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/manifest"
)

// runXema runs the xema command in-process with fresh flag values and returns its
// stdout and exit status.
func runXema(t *testing.T, args ...string) (string, int) {
	t.Helper()
	lint, _, err := newRootCmd().Find([]string{"biome", "lint"})
	if err != nil {
		t.Fatal(err)
	}
	if err := lint.Flags().Set("format", "text"); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		return out.String(), exitCode(err)
	}
	return out.String(), 0
}

const testdata = "../../internal/manifest/testdata/"

func TestBiomeLint(t *testing.T) {
	golden, err := os.ReadFile(testdata + "broken.golden")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		out  string // exact stdout, or a prefix when it ends in "…"
	}{
		{"valid", []string{"biome", "lint", testdata + "valid"}, 0, "software-dev 1.2.0: valid, 3 capabilities (2 contributed)\n"},
		{"valid json", []string{"biome", "lint", "--format", "json", testdata + "valid"}, 0, "[]\n"},
		{"broken", []string{"biome", "lint", testdata + "broken"}, 1, string(golden)},
		{"no dir", []string{"biome", "lint"}, 2, ""},
		{"two dirs", []string{"biome", "lint", "a", "b"}, 2, ""},
		{"bad format", []string{"biome", "lint", "--format", "yaml", testdata + "valid"}, 2, ""},
		{"unknown flag", []string{"biome", "lint", "--strict", testdata + "valid"}, 2, "…"},
		{"missing dir", []string{"biome", "lint", testdata + "nope"}, 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code := runXema(t, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; output:\n%s", code, tt.code, out)
			}
			if prefix, ok := strings.CutSuffix(tt.out, "…"); ok {
				if !strings.HasPrefix(out, prefix) {
					t.Fatalf("output %q does not start with %q", out, prefix)
				}
			} else if out != tt.out {
				t.Fatalf("output:\n%s\nwant:\n%s", out, tt.out)
			}
		})
	}
}

func TestBiomeLintJSON(t *testing.T) {
	out, code := runXema(t, "biome", "lint", "--format", "json", testdata+"broken")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	var got []manifest.Problem
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not a JSON array of problems: %v\n%s", err, out)
	}
	_, want, _ := manifest.LoadDir(testdata + "broken")
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("got %d problems, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("problem %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if !strings.Contains(out, `"file": "contributions/open-pr.capability.contribution.json"`) ||
		!strings.Contains(out, `"path": "/manifest/riskTier"`) ||
		!strings.Contains(out, `"message": "must be one of low, medium, high, critical"`) {
		t.Fatalf("JSON keys are not file, path, message:\n%s", out)
	}
}
