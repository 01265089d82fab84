package inputschema

import (
	"encoding/json"
	"testing"
)

// BenchmarkValidate measures one invocation's input check against the spec's
// create-pull-request input schema.
func BenchmarkValidate(b *testing.B) {
	s := mustCompile(b, createPullRequest())
	cases := []struct {
		name       string
		input      string
		violations int
	}{
		{"valid", `{"sourceBranch": "feature/x", "targetBranch": "main", "title": "Add user authentication", "description": "Adds login and logout."}`, 0},
		{"invalid", `{"sourceBranch": 42, "title": "", "reviewer": "bob"}`, 4},
	}
	for _, c := range cases {
		input := json.RawMessage(c.input)
		if got := len(s.Validate(input)); got != c.violations {
			b.Fatalf("%s: %d violations, want %d", c.name, got, c.violations)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.Validate(input)
			}
		})
	}
}

// BenchmarkCompile measures publishing one capability's input schema.
func BenchmarkCompile(b *testing.B) {
	schema := createPullRequest()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile("connector:scm.create-pull-request@1", schema); err != nil {
			b.Fatal(err)
		}
	}
}
