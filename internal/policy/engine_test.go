package policy

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

func TestDecide(t *testing.T) {
	e := loadedEngine(t)
	for _, tc := range decisionCases() {
		t.Run(tc.name, func(t *testing.T) {
			d, err := e.Decide(context.Background(), tc.in)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range d.Reasons {
				got = append(got, r.Code)
				if r.Detail == "" {
					t.Errorf("reason %s has no detail", r.Code)
				}
			}
			if !slices.Equal(got, tc.codes) {
				t.Fatalf("codes = %v, want %v", got, tc.codes)
			}
			if d.Allow != (len(tc.codes) == 0) {
				t.Fatalf("allow = %v with reasons %v", d.Allow, got)
			}
			if !strings.HasPrefix(d.Revision, "r1+p") { // r1 and the platform Rego of testdata/custom
				t.Fatalf("revision = %q", d.Revision)
			}
		})
	}
}

func TestDecideCarriesSuggestionsAndObligations(t *testing.T) {
	e := loadedEngine(t)
	ctx := context.Background()
	d, err := e.Decide(ctx, with(agentCall("kb:page.read@1"), func(in *Input) { in.Environment = "org" }))
	if err != nil {
		t.Fatal(err)
	}
	want := []Suggestion{
		{Kind: "request-grant", Capability: "kb:page.read@1", Environment: "org"},
		{Kind: "switch-environment", From: "org", To: "app"},
	}
	if !slices.Equal(d.Suggestions, want) {
		t.Fatalf("suggestions = %+v, want %+v", d.Suggestions, want)
	}
	d, err = e.Decide(ctx, with(agentCall("kb:page.write@1"), func(in *Input) { in.Groups = []string{"editors"} }))
	if err != nil {
		t.Fatal(err)
	}
	wantObl := []Obligation{{Kind: "approval"}, {Kind: "rate-limit", Requests: 60, Per: "1m"}}
	if !d.Allow || !slices.Equal(d.Obligations, wantObl) {
		t.Fatalf("allow %v obligations = %+v, want %+v", d.Allow, d.Obligations, wantObl)
	}
	d, err = e.Decide(ctx, agentCall("kb:old.read@1"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Suggestions, []Suggestion{{Kind: "use-successor", Capability: "kb:page.read@1"}}) {
		t.Fatalf("suggestions = %+v", d.Suggestions)
	}
}

func TestDecideWithoutBundleFailsClosed(t *testing.T) {
	e, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Decide(context.Background(), agentCall("kb:page.read@1")); !errors.Is(err, ErrNoBundle) {
		t.Fatalf("err = %v, want ErrNoBundle", err)
	}
	if tarGz, etag := e.Bundle(); tarGz != nil || etag != "" || e.Revision() != "" {
		t.Fatal("bundle served before any load")
	}
}

func TestLoadSwapsAndFailedLoadKeepsServing(t *testing.T) {
	e := loadedEngine(t)
	ctx := context.Background()
	_, etag1 := e.Bundle()

	data := testData(t)
	delete(data["grants"].(map[string]any), "kb:page.read@1")
	if err := e.Load(ctx, data, "r2"); err != nil {
		t.Fatal(err)
	}
	d, err := e.Decide(ctx, agentCall("kb:page.read@1"))
	if err != nil {
		t.Fatal(err)
	}
	rev2 := e.Revision()
	if d.Allow || !strings.HasPrefix(rev2, "r2") || d.Revision != rev2 || d.Reasons[0].Code != "MISSING_GRANT" {
		t.Fatalf("after swap (serving %s): %+v", rev2, d)
	}
	if _, etag2 := e.Bundle(); etag2 == etag1 {
		t.Fatal("etag unchanged after a data change")
	}

	bad := []struct {
		name string
		data map[string]any
		rev  string
	}{
		{"reserved key", map[string]any{"authz": map[string]any{}}, "r3"},
		{"not JSON", map[string]any{"grants": make(chan int)}, "r3"},
		{"no revision", testData(t), ""},
	}
	for _, b := range bad {
		if err := e.Load(ctx, b.data, b.rev); err == nil {
			t.Fatalf("%s: load succeeded", b.name)
		}
		if e.Revision() != rev2 {
			t.Fatalf("%s: serving revision = %q, want %s", b.name, e.Revision(), rev2)
		}
	}
}

func TestPlatformRegoThatDoesNotCompileNeverServes(t *testing.T) {
	dir := t.TempDir()
	src := "package xema.custom\n\ndeny contains x if x := no_such_function(1)\n"
	if err := os.WriteFile(filepath.Join(dir, "broken.rego"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e, err := New(ctx, Options{ExtraDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(ctx, testData(t), "r1"); err == nil {
		t.Fatal("a bundle that does not compile was loaded")
	}
	if _, err := e.Decide(ctx, agentCall("kb:page.read@1")); !errors.Is(err, ErrNoBundle) {
		t.Fatalf("err = %v, want ErrNoBundle", err)
	}
}

func TestPlatformRegoOutsideCustomPackageRejected(t *testing.T) {
	dir := t.TempDir()
	src := "package xema.authz\n\ndeny contains {\"code\": \"X\", \"detail\": \"\"}\n"
	if err := os.WriteFile(filepath.Join(dir, "override.rego"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), Options{ExtraDir: dir}); err == nil {
		t.Fatal("platform Rego in package xema.authz accepted")
	}
}

func TestEmbeddedPolicyTests(t *testing.T) {
	rep, err := Test(context.Background(), TestOptions{WithBuiltin: true, Coverage: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 0 || rep.Passed < 40 {
		t.Fatalf("passed %d failed %d", rep.Passed, rep.Failed)
	}
	if rep.Coverage == nil || *rep.Coverage < 90 {
		t.Fatalf("coverage = %v, want >= 90", rep.Coverage)
	}
}

func TestPolicyTestReportsFailures(t *testing.T) {
	dir := t.TempDir()
	src := "package platformtest\n\ntest_allows_unknown if data.xema.authz.decision.allow with input as {}\n"
	if err := os.WriteFile(filepath.Join(dir, "x_test.rego"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := Test(context.Background(), TestOptions{Dirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 1 || rep.Coverage != nil {
		t.Fatalf("failed = %d coverage %v, want 1 failure and no coverage", rep.Failed, rep.Coverage)
	}
}

// TestInputValueIsTheJSONInput: the input document built directly is the one OPA would
// build from Input's JSON (as stock OPA receives it), for every input of the corpus and
// for inputs with every optional field set, so a call reads the same fields either way. A
// nil list is built as [] where its JSON is null.
func TestInputValueIsTheJSONInput(t *testing.T) {
	full := with(agentCall("kb:page.read@1"), func(in *Input) {
		in.Biome, in.Project, in.Session, in.ResourceOwner = "b1", "p1", "s1", "agent:x"
		in.Usage = &Usage{RateExceeded: true, RetryAfterSeconds: 3}
		in.Bindings = map[string]bool{"repository/writer": true, "repository/reader": false}
		in.InstanceRelations = map[string]bool{"doc_page#editor": true}
		in.Approval = &Approval{Requester: "user:bob", ApprovalID: "apr_1"}
		in.Armed = []string{"kb:*", "doc:*"}
		in.Delegation = &Delegation{Person: Subject{Kind: "user", Ref: "user:ann"}, OrgRole: "org_member", Groups: []string{"g"},
			Roles: []string{"r"}, Actors: []string{"agent:support-bot"}, MayAct: []string{"agent:support-bot"}}
	})
	for _, tc := range append(corpus(), decisionCase{name: "every field", in: full}) {
		asJSON := tc.in
		lists := []*[]string{&asJSON.Groups, &asJSON.Roles, &asJSON.Armed}
		if d := asJSON.Delegation; d != nil {
			c := *d
			asJSON.Delegation = &c
			lists = append(lists, &c.Groups, &c.Roles, &c.Actors)
		}
		for _, l := range lists {
			if *l == nil {
				*l = []string{}
			}
		}
		raw, err := json.Marshal(asJSON)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		want, err := ast.InterfaceToValue(doc)
		if err != nil {
			t.Fatal(err)
		}
		if got := inputValue(tc.in); got.Compare(want) != 0 {
			t.Fatalf("%s:\n built %v\n JSON  %v", tc.name, got, want)
		}
	}
}

// TestPlatformRegoErrorsNameTheFile: a platform policy that does not parse, does not compile
// or is outside xema.custom is reported under its own path in --policy-dir (what the operator
// opens), never under the bundle's custom/ name; at start and on reload.
func TestPlatformRegoErrorsNameTheFile(t *testing.T) {
	ctx := context.Background()
	for name, src := range map[string]string{
		"parse":   "package xema.custom\n\ndeny contains {",
		"compile": "package xema.custom\n\ndeny contains x if x := no_such_function(1)\n",
		"package": "package xema.authz\n\ndeny contains {\"code\": \"X\", \"detail\": \"\"}\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "team", "broken.rego")
			if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
				t.Fatal(err)
			}
			check := func(when string, err error) {
				t.Helper()
				if err == nil || !strings.Contains(err.Error(), file) || strings.Contains(err.Error(), "custom/team") {
					t.Fatalf("%s: %v; want an error naming %s", when, err, file)
				}
			}
			// At start.
			if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			e, err := New(ctx, Options{ExtraDir: dir})
			if err == nil {
				err = e.Load(ctx, testData(t), "r1")
			}
			check("at start", err)

			// On reload, over a serving policy.
			if err := os.WriteFile(file, []byte("package xema.custom\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if e, err = New(ctx, Options{ExtraDir: dir}); err != nil {
				t.Fatal(err)
			}
			if err := e.Load(ctx, testData(t), "r1"); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, []byte(src+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = e.ReloadExtra(ctx)
			check("on reload", err)
		})
	}
}
