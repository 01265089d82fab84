package policy

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// decisionCase is one call against testdata/data.json with the reason codes it must get.
type decisionCase struct {
	name  string
	in    Input
	codes []string // empty: allowed
}

func agentCall(ref string) Input {
	return Input{
		Ref:         ref,
		Subject:     Subject{Kind: "agent", Ref: "agent:support-bot"},
		Groups:      []string{"support"},
		Roles:       []string{"reader"},
		OrgRole:     "org_member",
		Org:         "acme",
		Environment: "project",
		Resource:    "kb/pages/welcome",
		Armed:       []string{"*"},
	}
}

// approving is in deciding a held call of requester.
func approving(in Input, requester string) Input {
	in.Approval = &Approval{Requester: requester, ApprovalID: "apr_1"}
	return in
}

// forAnn is in made by its subject acting for user:ann, an org member in group support,
// changed by fs.
func forAnn(in Input, fs ...func(*Delegation)) Input {
	d := &Delegation{Person: Subject{Kind: "user", Ref: "user:ann"}, OrgRole: "org_member", Groups: []string{"support"},
		Roles: []string{}, Actors: []string{in.Subject.Ref}}
	for _, f := range fs {
		f(d)
	}
	in.Delegation = d
	return in
}

func with(in Input, f func(*Input)) Input {
	f(&in)
	return in
}

func decisionCases() []decisionCase {
	read := agentCall("kb:page.read@1")
	rootInstall := with(agentCall("biome:install@1"), func(in *Input) {
		in.Subject = Subject{Kind: "user", Ref: "user:root"}
		in.OrgRole = "org_admin"
		in.Environment = "org"
	})
	return []decisionCase{
		{"allow", read, nil},
		{"allow by group with approval", with(agentCall("kb:page.write@1"), func(in *Input) { in.Groups = []string{"editors"} }), nil},
		{"unknown capability", agentCall("kb:nope@1"), []string{"UNKNOWN_CAPABILITY"}},
		{"not armed", with(read, func(in *Input) { in.Armed = []string{"connector:*"} }), []string{"NOT_ARMED"}},
		{"resource not reachable", with(read, func(in *Input) { in.Resource = "kb/secrets/keys" }), []string{"RESOURCE_NOT_REACHABLE"}},
		{"environment not allowed", with(read, func(in *Input) { in.Environment = "org" }), []string{"ENVIRONMENT_NOT_ALLOWED"}},
		{"subject not covered", agentCall("kb:page.write@1"), []string{"SUBJECT_NOT_COVERED"}},
		{"audience incompatible", with(read, func(in *Input) { in.Environment = "public-session" }), []string{"AUDIENCE_INCOMPATIBLE", "ENVIRONMENT_NOT_ALLOWED"}},
		{"rate limited", with(read, func(in *Input) { in.Usage = &Usage{RateExceeded: true, RetryAfterSeconds: 7} }), []string{"RATE_LIMITED"}},
		{"quota exceeded", with(read, func(in *Input) { in.Usage = &Usage{QuotaExceeded: true} }), []string{"QUOTA_EXCEEDED"}},
		{"retired", agentCall("kb:old.read@1"), []string{"CAPABILITY_RETIRED"}},
		{"not published", agentCall("kb:draft.read@1"), []string{"NOT_PUBLISHED"}},
		{"not safe for agents", agentCall("kb:secret.read@1"), []string{"NOT_SAFE_FOR_AGENTS"}},
		{"caller constraint", agentCall("workflow:run.start@1"), []string{"CALLER_CONSTRAINT"}},
		{"missing binding", agentCall("connector:scm.create-pull-request@1"), []string{"MISSING_BINDING"}},
		{"binding present", with(agentCall("connector:scm.create-pull-request@1"), func(in *Input) {
			in.Bindings = map[string]bool{"repository/writer": true}
		}), nil},
		{"instance grade", agentCall("doc:page.share@1"), []string{"INSTANCE_GRADE_NOT_MET"}},
		{"instance relation held", with(agentCall("doc:page.share@1"), func(in *Input) {
			in.InstanceRelations = map[string]bool{"doc_page#editor": true}
		}), nil},
		{"org admin holds kernel capability", rootInstall, nil},
		{"member lacks human baseline", with(agentCall("biome:install@1"), func(in *Input) {
			in.Subject = Subject{Kind: "user", Ref: "user:bob"}
			in.Environment = "org"
		}), []string{"HUMAN_BASELINE_NOT_MET", "MISSING_GRANT"}},
		{"agent needs a grant", with(agentCall("biome:install@1"), func(in *Input) { in.Environment = "org" }), []string{"MISSING_GRANT"}},
		{"approver holds the held capability", approving(rootInstall, "agent:support-bot"), nil},
		{"approver is the requester", approving(rootInstall, "user:root"), []string{"OWN_APPROVAL"}},
		{"approver is not a person", approving(read, "agent:other-bot"), []string{"APPROVER_NOT_HUMAN"}},
		{"approval without requester", approving(rootInstall, ""), []string{"INVALID_INPUT"}},
		{"platform deny", with(read, func(in *Input) { in.Subject.Ref = "agent:blocked" }), []string{"PLATFORM_BLOCKED"}},
		{"delegated read", forAnn(read), nil},
		{"delegated write, both editors", forAnn(with(agentCall("kb:page.write@1"), func(in *Input) { in.Groups = []string{"editors"} }),
			func(d *Delegation) { d.Groups = []string{"editors"} }), nil},
		{"delegated write, person not an editor", forAnn(with(agentCall("kb:page.write@1"), func(in *Input) { in.Groups = []string{"editors"} })),
			[]string{"PERSON_NOT_ALLOWED"}},
		{"delegated write, actor not an editor", forAnn(agentCall("kb:page.write@1"), func(d *Delegation) { d.Groups = []string{"editors"} }),
			[]string{"SUBJECT_NOT_COVERED"}},
		{"not delegable", forAnn(with(agentCall("connector:scm.create-pull-request@1"), func(in *Input) {
			in.Bindings = map[string]bool{"repository/writer": true}
		})), []string{"NOT_DELEGABLE"}},
		{"actor the person allows", forAnn(read, func(d *Delegation) { d.MayAct = []string{"agent:support-bot"} }), nil},
		{"actor the person does not allow", forAnn(read, func(d *Delegation) { d.MayAct = []string{"agent:other"} }), []string{"ACTOR_NOT_ALLOWED"}},
		{"delegation without person", forAnn(read, func(d *Delegation) { d.Person = Subject{} }), []string{"INVALID_INPUT"}},
	}
}

// testData reads testdata/data.json; a broken fixture panics (also outside a test).
func testData(testing.TB) map[string]any {
	raw, err := os.ReadFile(filepath.Join("testdata", "data.json"))
	if err != nil {
		panic(err)
	}
	var data map[string]any
	if err := json.Unmarshal(raw, &data); err != nil {
		panic(err)
	}
	return data
}

// loadedEngine is an Engine with the platform Rego of testdata/custom and testdata/data.json.
func loadedEngine(t testing.TB) *Engine {
	t.Helper()
	ctx := context.Background()
	e, err := New(ctx, Options{ExtraDir: filepath.Join("testdata", "custom")})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(ctx, testData(t), "r1"); err != nil {
		t.Fatal(err)
	}
	return e
}
