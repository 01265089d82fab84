package binding_test

import (
	"testing"

	"github.com/xemahq/xema/internal/binding"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/store"
)

// TestSelectMostSpecific: project beats org-wide, environment-specific beats any, a more
// literal pattern beats a wider one, other orgs and conversations never match.
func TestSelectMostSpecific(t *testing.T) {
	const ref = "connector:scm.create-pull-request@1"
	bs := []store.Binding{
		{ID: "org-any", Org: "acme", RefPattern: "connector:*"},
		{ID: "org-scm", Org: "acme", RefPattern: "connector:scm.*"},
		{ID: "org-env", Org: "acme", Environment: "project", RefPattern: "connector:*"},
		{ID: "p1-any", Org: "acme", Project: "p1", RefPattern: "connector:*"},
		{ID: "p1-env", Org: "acme", Project: "p1", Environment: "project", RefPattern: "connector:*"},
		{ID: "other-org", Org: "globex", Project: "p1", Environment: "project", RefPattern: "connector:scm.*"},
		{ID: "chat", Org: "acme", Project: "p1", Environment: "project", RefPattern: "connector:*", Conversation: "general"},
		{ID: "tracker", Org: "acme", Project: "p1", Environment: "project", RefPattern: "connector:tracker.*"},
	}
	ec := func(project, env string) identity.ExecContext {
		return identity.ExecContext{Org: "acme", Project: project, Environment: env}
	}
	for _, tc := range []struct {
		ec   identity.ExecContext
		conv string
		want string
	}{
		{ec("p1", "project"), "", "p1-env"},
		{ec("p1", "session"), "", "p1-any"},
		{ec("p2", "project"), "", "org-env"},
		{ec("p2", "session"), "", "org-scm"},
		{ec("p1", "project"), "general", "chat"},
		{ec("p1", "project"), "random", ""},
		{identity.ExecContext{Org: "initech", Environment: "project"}, "", ""},
	} {
		b, ok := binding.Select(bs, tc.ec, ref, tc.conv)
		if got := map[bool]string{true: b.ID, false: ""}[ok]; got != tc.want {
			t.Errorf("%+v conversation %q: got %q, want %q", tc.ec, tc.conv, got, tc.want)
		}
	}
}

// TestProvidersServeTheFamilies pins which provider serves which ref.
func TestProvidersServeTheFamilies(t *testing.T) {
	ps := binding.Providers()
	for name, want := range map[string]int{"github": 3, "gitlab": 3, "gitea": 3, "slack": 1, "telegram": 1} {
		p, ok := ps[name]
		if !ok || len(p.Refs()) != want {
			t.Errorf("%s serves %v, want %d refs", name, p.Refs(), want)
		}
	}
	if ps.Serves("kb:page.read@1") || !ps.Serves("connector:channel.send-message@1") {
		t.Error("Serves answers for refs no provider has")
	}
}
