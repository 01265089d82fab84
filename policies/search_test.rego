package xematest.search

import data.xematest.authz

searchable_with(inp, d) := s if {
	s := data.xema.authz.searchable with input as inp
		with data.xema.capabilities as d.capabilities
		with data.xema.grants as d.grants
		with data.xema.versions as object.get(d, "versions", {})
		with data.xema.orgRoleRank as d.orgRoleRank
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
