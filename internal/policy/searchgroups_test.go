package policy

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/xemahq/xema/internal/grant"
)

// TestSearchGroupsSplitOnEveryField: search decides a group of refs once, on the values
// internal/grant copied into it, so two refs must share a group only when every field that
// search's clean set reads is equal. For each such field, two refs whose descriptor, pinned
// descriptor or grant differ in that field alone, one allowed and one denied for the caller:
// they land in different groups, the allowed one is clean and the denied one is not. A field
// the grouping omits (from grant.SearchCapFields or SearchGrantFields) fails its row: the two
// refs then share a group, or the group lacks the field and the denied ref is clean.
func TestSearchGroupsSplitOnEveryField(t *testing.T) {
	agent := agentCall("")
	agent.Resource = ""
	user := with(agent, func(in *Input) { in.Subject = Subject{Kind: "user", Ref: "user:bob"} })
	unsafe := func(d map[string]any) { d["safeForAgents"] = false }
	// Each row: the field, what the two refs share (both), how the denied one differs
	// (denied), and the caller.
	type fields struct{ descriptor, pinned, grant map[string]any }
	rows := []struct {
		field        string
		both, denied func(f fields)
		caller       Input
	}{
		{field: "lifecycle", denied: func(f fields) { f.descriptor["lifecycle"] = "draft" }},
		{field: "safeForAgents", denied: func(f fields) { unsafe(f.descriptor) }},
		{field: "callerConstraint", denied: func(f fields) { f.descriptor["callerConstraint"] = "workflow-step" }},
		{field: "requiredBindings", denied: func(f fields) {
			f.descriptor["requiredBindings"] = []any{map[string]any{"roleKey": map[string]any{"resourceKind": "repository", "role": "writer"}, "ownerKind": "project"}}
		}},
		{field: "instanceGrade", denied: func(f fields) {
			f.descriptor["instanceGrade"] = map[string]any{"resourceType": "doc_page", "relation": "editor", "environments": []any{"project"}}
		}},
		{field: "outputClassification", both: func(f fields) { f.grant["audience"] = map[string]any{"internal": true} },
			denied: func(f fields) { f.descriptor["outputClassification"] = "confidential" }},
		{field: "humanBaseline", both: func(f fields) { f.grant["subjects"] = nil },
			denied: func(f fields) { f.descriptor["humanBaseline"] = map[string]any{"kind": "explicit-only"} }, caller: user},
		{field: "audience", denied: func(f fields) { f.grant["audience"] = map[string]any{"public": true} }},
		{field: "biomeVersion", both: func(f fields) { unsafe(f.pinned) }, denied: func(f fields) { f.grant["biomeVersion"] = "0.9.0" }},
		{field: "environments", denied: func(f fields) { f.grant["environments"] = map[string]any{"app": true} }},
		{field: "org", denied: func(f fields) { f.grant["org"] = "globex" }},
		{field: "profile", both: func(f fields) { f.grant["environments"] = nil }, denied: func(f fields) { f.grant["profile"] = "none" }},
		{field: "subjects", denied: func(f fields) { f.grant["subjects"] = map[string]any{"agent:other": true, "group:support": false} }},
		// The pinned descriptor's fields are grouped as the catalog's: one of them stands for all.
		{field: "pinned safeForAgents", both: func(f fields) { f.grant["biomeVersion"] = "0.9.0" }, denied: func(f fields) { unsafe(f.pinned) }},
	}
	want := append(slices.Clone(grant.SearchCapFields), grant.SearchGrantFields...)
	var got []string
	for _, r := range rows {
		if r.field != "pinned safeForAgents" {
			got = append(got, r.field)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("rows for fields %v; internal/grant groups by %v: a row for each", got, want)
	}
	ctx := context.Background()
	e, err := New(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const allowed, denied = "t:a.read@1", "t:b.read@1"
	for _, r := range rows {
		t.Run(r.field, func(t *testing.T) {
			data := testData(t)
			caps, grants, versions := map[string]any{}, map[string]any{}, map[string]any{}
			for _, ref := range []string{allowed, denied} {
				f := fields{
					descriptor: map[string]any{"biome": map[string]any{"id": "t", "version": "1.0.0"}, "lifecycle": "published",
						"outputClassification": "internal", "safeForAgents": true, "humanBaseline": nil, "callerConstraint": "",
						"requiredBindings": []any{}, "instanceGrade": nil},
					grant: map[string]any{"grantId": "g_" + ref, "org": "acme", "biomeVersion": "1.0.0", "profile": "read-only-assistant",
						"environments": map[string]any{"project": true}, "subjects": map[string]any{"agent:support-bot": true, "user:bob": true},
						"audience": nil},
				}
				f.pinned = maps.Clone(f.descriptor)
				if r.both != nil {
					r.both(f)
				}
				if ref == denied {
					r.denied(f)
				}
				caps[ref], versions[ref] = f.descriptor, map[string]any{"0.9.0": f.pinned}
				grants[ref] = map[string]any{"t": map[string]any{"acme": f.grant}}
			}
			data["capabilities"], data["grants"], data["versions"] = caps, grants, versions
			indexed := withIndex(t, data)
			if err := e.Load(ctx, indexed, "r-"+r.field); err != nil {
				t.Fatal(err)
			}
			caller := r.caller
			if caller.Subject.Ref == "" {
				caller = agent
			}
			for ref, allow := range map[string]bool{allowed: true, denied: false} {
				d, err := e.Decide(ctx, with(caller, func(in *Input) { in.Ref = ref }))
				if err != nil || d.Allow != allow {
					t.Fatalf("%s: allow %v (%v), %v; the row wants %v", ref, d.Allow, d.Reasons, err, allow)
				}
			}
			groups := indexed["searchGroups"].(map[string]map[string]grant.SearchGroup)["acme"]
			for id, g := range groups {
				if g.Refs[allowed] && g.Refs[denied] {
					t.Errorf("%s and %s share group %s: the grouping omits %s", allowed, denied, id, r.field)
				}
			}
			s, err := e.Searchable(ctx, caller)
			if err != nil {
				t.Fatal(err)
			}
			if !s.Clean[allowed] || s.Clean[denied] {
				t.Errorf("clean set %v; want %s in it, %s not", s.Clean, allowed, denied)
			}
		})
	}
}
