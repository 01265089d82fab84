package policy

import (
	"context"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// mutations change one field of a call each, towards every deny rule and away from it.
var mutations = map[string]func(*Input){
	"no ref":             func(in *Input) { in.Ref = "" },
	"no environment":     func(in *Input) { in.Environment = "" },
	"no org":             func(in *Input) { in.Org = "" },
	"other org":          func(in *Input) { in.Org = "globex" },
	"no subject kind":    func(in *Input) { in.Subject.Kind = "" },
	"no subject ref":     func(in *Input) { in.Subject.Ref = "" },
	"user":               func(in *Input) { in.Subject = Subject{Kind: "user", Ref: "user:bob"} },
	"root":               func(in *Input) { in.Subject = Subject{Kind: "user", Ref: "user:root"}; in.OrgRole = "org_owner" },
	"workflow":           func(in *Input) { in.Subject = Subject{Kind: "workflow", Ref: "workflow:w1"} },
	"service":            func(in *Input) { in.Subject = Subject{Kind: "service", Ref: "service:s1"} },
	"blocked":            func(in *Input) { in.Subject.Ref = "agent:blocked" },
	"unarmed":            func(in *Input) { in.Armed = nil },
	"armed elsewhere":    func(in *Input) { in.Armed = []string{"connector:*"} },
	"no resource":        func(in *Input) { in.Resource = "" },
	"other resource":     func(in *Input) { in.Resource = "kb/secrets/keys" },
	"resource owner":     func(in *Input) { in.ResourceOwner = in.Subject.Ref },
	"rate exceeded":      func(in *Input) { in.Usage = &Usage{RateExceeded: true} },
	"quota exceeded":     func(in *Input) { in.Usage = &Usage{QuotaExceeded: true} },
	"within limits":      func(in *Input) { in.Usage = &Usage{} },
	"other biome":        func(in *Input) { in.Biome = "other" },
	"binding":            func(in *Input) { in.Bindings = map[string]bool{"repository/writer": true} },
	"relation":           func(in *Input) { in.InstanceRelations = map[string]bool{"doc_page#editor": true} },
	"approval":           func(in *Input) { in.Approval = &Approval{Requester: "agent:x", ApprovalID: "apr_1"} },
	"own approval":       func(in *Input) { in.Approval = &Approval{Requester: in.Subject.Ref, ApprovalID: "apr_1"} },
	"editors":            func(in *Input) { in.Groups = []string{"editors"} },
	"no groups":          func(in *Input) { in.Groups = nil },
	"no roles":           func(in *Input) { in.Roles = nil },
	"admin":              func(in *Input) { in.OrgRole = "org_admin" },
	"org environment":    func(in *Input) { in.Environment = "org" },
	"public environment": func(in *Input) { in.Environment = "public-session" },
	"unknown env":        func(in *Input) { in.Environment = "mars" },
	"for ann":            func(in *Input) { in.Delegation = delegationFor(in.Subject.Ref, "user:ann", "org_member", nil) },
	"for an admin":       func(in *Input) { in.Delegation = delegationFor(in.Subject.Ref, "user:root", "org_admin", nil) },
	"may act": func(in *Input) {
		in.Delegation = delegationFor(in.Subject.Ref, "user:ann", "", []string{in.Subject.Ref})
	},
	"may not act": func(in *Input) {
		in.Delegation = delegationFor(in.Subject.Ref, "user:ann", "", []string{"agent:other"})
	},
	"delegation broken": func(in *Input) { in.Delegation = &Delegation{} },
	"org connected": func(in *Input) {
		in.Connection = &Connection{Provider: "slack", Owner: "org", Status: "connected", ID: "con_1"}
	},
	"own connection missing": func(in *Input) {
		in.Connection = &Connection{Provider: "slack", Owner: "user", Person: in.Subject.Ref, Status: "missing"}
	},
	"connection expired": func(in *Input) {
		in.Connection = &Connection{Provider: "slack", Owner: "user", Person: "user:ann", Status: "needs-reconnect"}
	},
	"no person to connect": func(in *Input) { in.Connection = &Connection{Provider: "slack", Owner: "user", Status: "missing"} },
	"connection broken":    func(in *Input) { in.Connection = &Connection{} },
}

// delegationFor is actor acting for person.
func delegationFor(actor, person, orgRole string, mayAct []string) *Delegation {
	return &Delegation{Person: Subject{Kind: "user", Ref: person}, OrgRole: orgRole, Groups: []string{"support"},
		Roles: []string{}, Actors: []string{actor}, MayAct: mayAct}
}

// TestCleanIsSound: the allow path of fast.rego (`clean`) never holds while a deny rule
// fires, over the corpus: every decision case, each with every mutation and every pair of them.
func TestCleanIsSound(t *testing.T) {
	ctx := context.Background()
	e := loadedEngine(t)
	c := e.serving.Load()
	cleanQ, err := prepare(ctx, "data.xema.authz.clean", c.store, e.modules)
	if err != nil {
		t.Fatal(err)
	}
	denyQ, err := prepare(ctx, "data.xema.authz.deny", c.store, e.modules)
	if err != nil {
		t.Fatal(err)
	}
	var checked, cleanCount int
	check := func(label string, in Input) {
		t.Helper()
		checked++
		opts, stop := evalOptions(ctx, inputValue(in))
		rs, err := cleanQ.Eval(ctx, opts...)
		stop()
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) == 0 || rs[0].Expressions[0].Value.(*ast.Term).Value.Compare(ast.Boolean(true)) != 0 {
			return
		}
		cleanCount++
		opts, stop = evalOptions(ctx, inputValue(in))
		rs, err = denyQ.Eval(ctx, opts...)
		stop()
		if err != nil {
			t.Fatal(err)
		}
		if deny := rs[0].Expressions[0].Value.(*ast.Term).Value.(ast.Set); deny.Len() != 0 {
			t.Errorf("%s: clean holds, but deny = %v", label, deny)
		}
	}
	for _, tc := range corpus() {
		check(tc.name, tc.in)
	}
	if cleanCount == 0 {
		t.Fatal("clean never held: the allow path is never taken")
	}
	t.Logf("%d inputs, clean on %d", checked, cleanCount)
}

// TestDenyRulesAccountedFor trips when deny rules are added or removed: fast.rego's `clean`
// must then be updated to stand for the new rule (and TestCleanIsSound's mutations
// extended to reach it).
func TestDenyRulesAccountedFor(t *testing.T) {
	e, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	const mirrored = 36 // deny rules fast.rego's clean (and search.rego's search_clean) stands for
	n := 0
	authz := ast.MustParseRef("data.xema.authz")
	for _, m := range e.modules {
		if !m.parsed.Package.Path.Equal(authz) {
			continue
		}
		for _, r := range m.parsed.Rules {
			if r.Head.Name == "deny" || r.Head.Ref().String() == "deny" {
				n++
			}
		}
	}
	if n != mirrored {
		t.Fatalf("package xema.authz has %d deny rules; fast.rego's clean and search.rego's search_clean stand for %d: update both and this count", n, mirrored)
	}
}
