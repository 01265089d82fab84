package inputschema

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// suiteDir is the vendored copy of the official JSON-Schema-Test-Suite data.
const suiteDir = "../../test/testdata/JSON-Schema-Test-Suite"

// suiteTests is how many required draft 2020-12 tests the vendored files hold,
// counted from them (jq '[.[].tests | length] | add' over
// tests/draft2020-12/*.json, summed), so that a file lost or trimmed fails the
// test instead of shrinking it. Recount when the vendored copy is updated.
const suiteTests = 1245

// suiteRemotes serves the suite's remotes/ directory at
// http://localhost:1234/, as the suite requires, from disk: no network.
type suiteRemotes string

func (dir suiteRemotes) Load(rawURL string) (any, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" || u.Host != "localhost:1234" {
		return nil, fmt.Errorf("%s: not a suite remote", rawURL)
	}
	f, err := os.Open(filepath.Join(string(dir), filepath.FromSlash(strings.TrimPrefix(u.Path, "/"))))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return jsonschema.UnmarshalJSON(f)
}

type suiteGroup struct {
	Description string
	Schema      any
	Tests       []struct {
		Description string
		Data        any
		Valid       bool
	}
}

// TestJSONSchemaTestSuiteDraft2020 runs every required draft 2020-12 case of
// the official suite through the validator and requires all of them to pass:
// the validator choice rests on this.
func TestJSONSchemaTestSuiteDraft2020(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(suiteDir, "tests", "draft2020-12", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no suite files under %s", suiteDir)
	}
	remotes := suiteRemotes(filepath.Join(suiteDir, "remotes"))
	total, passed := 0, 0
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		d := json.NewDecoder(f)
		d.UseNumber()
		var groups []suiteGroup
		err = d.Decode(&groups)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for gi, g := range groups {
			c := jsonschema.NewCompiler()
			c.DefaultDraft(jsonschema.Draft2020)
			c.UseLoader(remotes)
			loc := fmt.Sprintf("http://suite.test/%s/%d.json", filepath.Base(file), gi)
			var sch *jsonschema.Schema
			err := c.AddResource(loc, g.Schema)
			if err == nil {
				sch, err = c.Compile(loc)
			}
			for _, tc := range g.Tests {
				total++
				name := fmt.Sprintf("%s: %s: %s", filepath.Base(file), g.Description, tc.Description)
				if err != nil {
					t.Errorf("%s: schema does not compile: %v", name, err)
					continue
				}
				if got := sch.Validate(tc.Data) == nil; got != tc.Valid {
					t.Errorf("%s: valid = %v, want %v", name, got, tc.Valid)
					continue
				}
				passed++
			}
		}
	}
	t.Logf("%d of %d required draft 2020-12 tests passed (%d files)", passed, total, len(files))
	if passed != total {
		t.Errorf("%d of %d required tests failed", total-passed, total)
	}
	if total != suiteTests {
		t.Errorf("the vendored suite holds %d tests, want %d", total, suiteTests)
	}
}
