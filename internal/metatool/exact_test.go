package metatool_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/manifest"
	"github.com/xemahq/xema/internal/metatool"
	"github.com/xemahq/xema/internal/policy/policyfixture"
	"github.com/xemahq/xema/internal/store"
)

// exactCorpus is a catalog in org acme (and grants of org globex) whose refs each meet one
// rule of the policy (some sharing a search group, some differing from it in one field): lifecycles the catalog shows but the policy does not invoke, a pinned
// descriptor, subjects by agent, group, role and none, a grant filed under acme naming
// globex, environments from the grant or its profile, audiences, bindings, instance grades,
// a workflow-only capability and human baselines (org role, explicit-only).
func exactCorpus(t *testing.T) (map[string]any, []*catalog.Entry) {
	t.Helper()
	descriptor := func(biome string, fields map[string]any) map[string]any {
		c := map[string]any{
			"biome": map[string]any{"id": biome, "version": "1.0.0"}, "lifecycle": "published",
			"riskTier": "low", "effectClass": "read", "outputClassification": "internal",
			"requiresApproval": false, "safeForAgents": true, "humanBaseline": nil,
			"requiredBindings": []any{}, "instanceGrade": nil,
		}
		maps.Copy(c, fields)
		return c
	}
	grantOf := func(org string, fields map[string]any) map[string]any {
		g := map[string]any{
			"grantId": "g_" + org, "org": org, "biomeVersion": "1.0.0", "profile": "read-only-assistant",
			"environments": map[string]any{"project": true}, "subjects": nil, "resources": []any{"*"},
			"requiresApproval": false, "audience": nil,
		}
		maps.Copy(g, fields)
		return g
	}
	bot := map[string]any{"agent:bot": true}
	type capability struct {
		ref, biome string
		fields     map[string]any
		grants     map[string]map[string]any // org → grant fields
	}
	corpus := []capability{
		{"kb:page.read@1", "kb", nil, map[string]map[string]any{"acme": {"subjects": bot}}},
		// One search group with kb:page.read@1 (equal values, in another biome too), and
		// refs differing from it in one field the groups copy.
		{"kb:page.find@1", "kb", nil, map[string]map[string]any{"acme": {"subjects": bot}}},
		{"hr:page.find@1", "hr", nil, map[string]map[string]any{"acme": {"subjects": bot}}},
		{"kb:page.graded@1", "kb", map[string]any{"instanceGrade": map[string]any{"resourceType": "doc_page", "relation": "editor", "environments": []any{"project"}}}, map[string]map[string]any{"acme": {"subjects": bot}}},
		{"kb:page.public@1", "kb", nil, map[string]map[string]any{"acme": {"subjects": bot, "audience": map[string]any{"public": true}}}},
		{"kb:page.list@1", "kb", map[string]any{"lifecycle": "deprecated"}, map[string]map[string]any{"acme": {}}},
		{"kb:page.old@1", "kb", map[string]any{"lifecycle": "retired"}, map[string]map[string]any{"acme": {}}},
		{"kb:page.write@1", "kb", map[string]any{"safeForAgents": false}, map[string]map[string]any{"acme": {"subjects": map[string]any{"group:editors": true}}}},
		{"kb:page.pinned@1", "kb", nil, map[string]map[string]any{"acme": {"biomeVersion": "0.9.0"}}},
		{"kb:page.bind@1", "kb", map[string]any{"requiredBindings": []any{map[string]any{"roleKey": map[string]any{"resourceKind": "repository", "role": "writer"}, "ownerKind": "project"}}}, map[string]map[string]any{"acme": {}}},
		{"kb:page.share@1", "kb", map[string]any{"instanceGrade": map[string]any{"resourceType": "doc_page", "relation": "editor", "environments": []any{"project"}}}, map[string]map[string]any{"acme": {}}},
		{"hr:leave.read@1", "hr", map[string]any{"outputClassification": "confidential"}, map[string]map[string]any{"acme": {"audience": map[string]any{"internal": true}}}},
		{"hr:leave.list@1", "hr", map[string]any{"outputClassification": "public"}, map[string]map[string]any{"acme": {"environments": nil, "subjects": map[string]any{"role:oncall": true, "agent:bot": false}}}},
		{"ops:deploy.run@1", "ops", map[string]any{"callerConstraint": "workflow-step"}, map[string]map[string]any{"acme": {"subjects": map[string]any{"role:oncall": true, "workflow:w1": true}}}},
		{"ops:admin.read@1", "ops", map[string]any{"humanBaseline": map[string]any{"kind": "org-role", "minimumOrgRole": "org_admin", "environments": []any{"org", "project"}}}, nil},
		{"ops:secret.read@1", "ops", map[string]any{"humanBaseline": map[string]any{"kind": "explicit-only"}}, map[string]map[string]any{"acme": {"subjects": map[string]any{"group:sre": true, "user:bob": true}}}},
		{"fin:ledger.read@1", "fin", nil, map[string]map[string]any{"globex": {}}},
		{"mix:x.read@1", "mix", nil, map[string]map[string]any{"acme": {"org": "globex"}, "globex": {}}},
	}
	caps, grants := map[string]any{}, map[string]any{}
	var entries []*catalog.Entry
	for _, c := range corpus {
		d := descriptor(c.biome, c.fields)
		caps[c.ref] = d
		byOrg := map[string]any{}
		for org, fields := range c.grants {
			byOrg[org] = grantOf(org, fields)
		}
		grants[c.ref] = map[string]any{c.biome: byOrg}
		entries = append(entries, &catalog.Entry{
			// The catalog shows every one (retired included): the policy must hold it back.
			Capability: store.Capability{Ref: c.ref, BiomeID: c.biome, BiomeVersion: "1.0.0", Lifecycle: store.LifecyclePublished},
			Manifest:   manifest.Manifest{Ref: c.ref, Title: c.ref, Summary: "corpus", EffectClass: "read", RiskTier: "low"},
		})
	}
	pinned := descriptor("kb", map[string]any{"safeForAgents": false})
	data := policyfixture.Data(t)
	data["capabilities"], data["grants"] = caps, grants
	data["versions"] = map[string]any{"kb:page.pinned@1": map[string]any{"0.9.0": pinned}}
	return data, entries
}

// TestSearchShowsExactlyWhatDecideAllows: for every caller of the corpus, a new caller's
// search (its first cut and clean set, then decisions for the rest of the cut) shows exactly
// the refs that a decision per ref allows (Describe of a funnel whose engine caches nothing,
// so each ref is decided), and a describe after the search, or by a new caller before any
// search, answers the same.
func TestSearchShowsExactlyWhatDecideAllows(t *testing.T) {
	ctx := context.Background()
	data, entries := exactCorpus(t)
	dec := &decider{Decider: engineOver(t, data, 0)}
	gw := toolsDeciding(t, entries, dec)
	reference := toolsOver(t, data, entries, -1)
	exec := func(subject, env, orgRole string, f func(*identity.ExecContext)) identity.ExecContext {
		kind, _, _ := strings.Cut(subject, ":")
		ec := identity.ExecContext{Subject: identity.Subject{Kind: kind, Ref: subject},
			OrgRole: orgRole, Org: "acme", Environment: env, Armed: []string{"*"}, Session: "s"}
		if f != nil {
			f(&ec)
		}
		return ec
	}
	callers := map[string]identity.ExecContext{
		"agent":              exec("agent:bot", "project", "org_member", nil),
		"agent armed for kb": exec("agent:bot", "project", "org_member", func(ec *identity.ExecContext) { ec.Armed = []string{"kb:*"} }),
		"agent, editors":     exec("agent:bot", "project", "org_member", func(ec *identity.ExecContext) { ec.Groups = []string{"editors"} }),
		"agent in app":       exec("agent:bot", "app", "org_member", nil),
		"agent, public":      exec("agent:bot", "public-session", "org_member", nil),
		"agent, unknown env": exec("agent:bot", "mars", "org_member", nil),
		"other agent":        exec("agent:other", "project", "org_member", nil),
		"globex agent":       exec("agent:bot", "project", "org_member", func(ec *identity.ExecContext) { ec.Org = "globex" }),
		"admin":              exec("user:alice", "org", "org_admin", nil),
		"admin in project":   exec("user:alice", "project", "org_admin", func(ec *identity.ExecContext) { ec.Groups = []string{"sre"} }),
		"member, oncall":     exec("user:bob", "project", "org_member", func(ec *identity.ExecContext) { ec.Roles = []string{"oncall"} }),
		"member in app":      exec("user:carol", "app", "org_member", func(ec *identity.ExecContext) { ec.Roles = []string{"oncall"} }),
		"workflow":           exec("workflow:w1", "project", "", nil),
		"unarmed agent":      exec("agent:bot", "project", "org_member", func(ec *identity.ExecContext) { ec.Armed = []string{} }),
	}
	// Refs shown from the clean set (no decision) and by a decision.
	shownClean, shownDecided := 0, 0
	for _, name := range slices.Sorted(maps.Keys(callers)) {
		ec := callers[name]
		var want []string
		for _, e := range entries {
			_, err := reference.Describe(ctx, ec, metatool.DescribeRequest{Refs: []string{e.Ref()}})
			var f *fault.Error
			switch {
			case err == nil:
				want = append(want, e.Ref())
			case !errors.As(err, &f) || f.Code != gateway.CodeUnknownCapability:
				t.Fatalf("%s: describe %s: %v", name, e.Ref(), err)
			}
		}
		slices.Sort(want)
		// A new caller's describe (which applies the first cut too) admits the same refs.
		first := ec
		first.Session = "describe first"
		var described []string
		for _, e := range entries {
			if _, err := gw.Describe(ctx, first, metatool.DescribeRequest{Refs: []string{e.Ref()}}); err == nil {
				described = append(described, e.Ref())
			}
		}
		slices.Sort(described)
		if !slices.Equal(described, want) {
			t.Errorf("%s: describe first admits %v; a decision per ref allows %v", name, described, want)
		}
		decided := len(dec.allowed)
		res, err := gw.Search(ctx, ec, metatool.SearchRequest{Limit: metatool.MaxSearchLimit})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got []string
		for _, h := range res.Capabilities {
			got = append(got, h.Ref)
			if slices.Contains(dec.allowed[decided:], h.Ref) {
				shownDecided++
			} else {
				shownClean++
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: search shows %v; a decision per ref allows %v", name, got, want)
		}
		if len(want) > 0 {
			if _, err := gw.Describe(ctx, ec, metatool.DescribeRequest{Refs: want}); err != nil {
				t.Errorf("%s: describe %v after the search: %v", name, want, err)
			}
		}
	}
	if shownClean == 0 || shownDecided == 0 {
		t.Fatalf("%d refs shown from the clean set, %d by a decision: the corpus misses a path", shownClean, shownDecided)
	}
	t.Logf("%d callers: %d refs shown from the clean set, %d by a decision", len(callers), shownClean, shownDecided)
}
