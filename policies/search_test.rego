package xematest.search

import data.xematest.authz

# index is grant.Index of a fixture: the subjects keys of its grants, and its baselined refs.
index(d) := {
	"grantedTo": {org: {key: refs |
		some key in subject_keys(d, org)
		refs := {ref | some ref, by_biome in d.grants; some by_org in by_biome; names(by_org[org], key)}
	} |
		some org in {org | some by_biome in d.grants; some by_org in by_biome; some org, _ in by_org}
	},
	"baselined": ({ref | some ref, c in d.capabilities; c.humanBaseline != null} | {ref |
		some ref, by_version in object.get(d, "versions", {})
		some c in by_version
		c.humanBaseline != null
	}),
}

subject_keys(d, org) := {key | some by_biome in d.grants; some by_org in by_biome; some key in keys_of(by_org[org])}

keys_of(g) := {"*"} if g.subjects == null

keys_of(g) := object.keys(g.subjects) if g.subjects != null

names(g, "*") if g.subjects == null

names(g, key) if g.subjects[key]

searchable_with(inp, d) := s if {
	i := index(d)
	s := data.xema.authz.searchable with input as inp
		with data.xema.grantedTo as i.grantedTo
		with data.xema.baselined as i.baselined
}

searchable(inp) := searchable_with(inp, authz.fixture)

caller := object.remove(authz.agent, ["ref", "resource"])

test_searchable_granted_refs if {
	s := searchable(caller)
	"kb:page.read@1" in s
	"kb:scoped.read@1" in s
	not "biome:install@1" in s # held by a human baseline, not granted
}

test_searchable_other_org_sees_no_grant if {
	count(searchable(object.union(caller, {"org": "globex"}))) == 0
}

test_searchable_subject_coverage if {
	d := authz.with_grants({"kb:page.read@1": {"demo": authz.org_grant({"subjects": {"agent:other": true}})}})
	not "kb:page.read@1" in searchable_with(caller, d)
	"kb:page.read@1" in searchable_with(object.union(caller, {"subject": {"kind": "agent", "ref": "agent:other"}}), d)
}

test_searchable_by_group_and_role if {
	by_group := authz.with_grants({"kb:page.read@1": {"demo": authz.org_grant({"subjects": {"group:support": true}})}})
	"kb:page.read@1" in searchable_with(caller, by_group)
	by_role := authz.with_grants({"kb:page.read@1": {"demo": authz.org_grant({"subjects": {"role:reader": true}})}})
	"kb:page.read@1" in searchable_with(caller, by_role)
	not "kb:page.read@1" in searchable_with(object.remove(caller, ["groups", "roles"]), by_role)
}

test_searchable_human_baselines if {
	s := searchable(authz.user("bob", "org_member"))
	"biome:install@1" in s
	"kb:page.publish@1" in s
	not "kb:page.publish@1" in searchable(caller) # an agent never holds a baseline
}

test_searchable_pinned_baseline if {
	d := object.union(authz.fixture, {"versions": {"kb:page.read@1": {"0.9.0": authz.capability({"humanBaseline": {"kind": "org-role", "minimumOrgRole": "org_member", "environments": ["project"]}})}}})
	nogrant := object.union(d, {"grants": {}})
	"kb:page.read@1" in searchable_with(authz.user("bob", "org_member"), nogrant)
}
