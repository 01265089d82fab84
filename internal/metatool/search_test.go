package metatool_test

import (
	"context"
	"slices"
	"testing"

	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/metatool"
	"github.com/xemahq/xema/internal/policy"
)

// commentRef is a capability of the fixture the bot is granted.
const commentRef = "ticket:comment.add@1"

// decider is the fixture's policy engine seen through a test's lens: it counts decisions
// and search sets asked for, can deny everything, and can claim another revision or a non-deterministic policy.
type decider struct {
	metatool.Decider
	calls       int
	allowed     []string // the refs of the decisions that allowed, in order
	denyAll     bool
	rev         string
	uncacheable bool
}

func (d *decider) Decide(ctx context.Context, in policy.Input) (policy.Decision, error) {
	d.calls++
	dec, err := d.Decider.Decide(ctx, in)
	if d.denyAll {
		dec.Allow = false
	}
	if dec.Allow {
		d.allowed = append(d.allowed, in.Ref)
	}
	return dec, err
}

// Searchable counts as asking the policy; denyAll leaves the clean set empty, so every ref
// of the cut is decided (and denied).
func (d *decider) Searchable(ctx context.Context, in policy.Input) (policy.SearchSets, error) {
	d.calls++
	sets, err := d.Decider.Searchable(ctx, in)
	if d.denyAll {
		sets.Clean = nil
	}
	return sets, err
}

func (d *decider) Revision() string {
	if d.rev != "" {
		return d.rev
	}
	return d.Decider.Revision()
}

func (d *decider) CacheStats() policy.CacheStats {
	s := d.Decider.CacheStats()
	if d.uncacheable {
		s.Enabled = false
	}
	return s
}

// TestSearchRemembersAuthorizedSets: a caller's second search asks the policy nothing, and a
// new policy revision, another caller or a policy whose decisions may not be cached is asked
// again, so a search never shows what the serving policy would not admit.
func TestSearchRemembersAuthorizedSets(t *testing.T) {
	ctx := context.Background()
	f := apptest.New(t, apptest.Options{})
	dec := &decider{Decider: f.App.Policy}
	gw, err := metatool.New(metatool.Deps{Catalog: f.App.Catalog, Policy: dec, Runners: f.App.Gateway})
	if err != nil {
		t.Fatal(err)
	}
	bot := apptest.Exec("agent:support-bot", "project", "")
	// who is a subject ref; a caller other than the bot is armed for nothing.
	search := func(who string) []string {
		t.Helper()
		ec := bot
		if who != bot.Subject.Ref {
			ec.Subject.Ref, ec.Armed = who, []string{}
		}
		res, err := gw.Search(ctx, ec, metatool.SearchRequest{Query: "comment", Limit: metatool.MaxSearchLimit})
		if err != nil {
			t.Fatal(err)
		}
		var refs []string
		for _, h := range res.Capabilities {
			refs = append(refs, h.Ref)
		}
		return refs
	}
	first := search("agent:support-bot")
	if !slices.Contains(first, commentRef) || dec.calls == 0 {
		t.Fatalf("first search %v after %d decisions; want %s, decided", first, dec.calls, commentRef)
	}
	for _, step := range []struct {
		name      string
		change    func()
		who       string
		decides   bool
		wantFound bool
	}{
		{"same caller again", func() {}, "agent:support-bot", false, true},
		{"another caller", func() {}, "agent:other-bot", true, false},
		{"a new revision that denies", func() { dec.rev, dec.denyAll = "rev-2", true }, "agent:support-bot", true, false},
		{"the revision back, admitting", func() { dec.rev, dec.denyAll = "", false }, "agent:support-bot", false, true},
		{"decisions not cacheable", func() { dec.uncacheable = true }, "agent:support-bot", true, true},
		{"still not cacheable", func() {}, "agent:support-bot", true, true},
	} {
		step.change()
		before := dec.calls
		got := search(step.who)
		if decided := dec.calls > before; decided != step.decides {
			t.Fatalf("%s: decided %d times; want decisions: %v", step.name, dec.calls-before, step.decides)
		}
		if found := slices.Contains(got, commentRef); found != step.wantFound {
			t.Fatalf("%s: search %v; want %s shown: %v", step.name, got, commentRef, step.wantFound)
		}
	}
}
