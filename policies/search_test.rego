package xematest.search

import data.xematest.authz

# index is internal/grant's index of a fixture: the subjects keys of its grants, its
# baselined refs and its search groups, one a ref (internal/grant groups refs of equal
# values; the tests of groups of several refs build them by hand).
index(d) := {
	"grantedTo": {org: {key: refs |
		some key in subject_keys(d, org)
		refs := {ref: true | some ref, by_biome in d.grants; some by_org in by_biome; names(by_org[org], key)}
	} |
		some org in {org | some by_biome in d.grants; some by_org in by_biome; some org, _ in by_org}
	},
	"baselined": {ref: true | some ref in baselined(d)},
	"groupedTo": {org: {key: {ref | some ref, g in declared_grants(d, org); key in keys_of(g)} |
		some key in {key | some g in declared_grants(d, org); some key in keys_of(g)}
	} |
		some org in {org | some by_biome in d.grants; some by_org in by_biome; some org, _ in by_org}
	},
	"searchGroups": {org: {ref: group(d, ref, g) | some ref, g in declared_grants(d, org)} |
		some org in {org | some by_biome in d.grants; some by_org in by_biome; some org, _ in by_org}
	},
}

baselined(d) := {ref | some ref, c in d.capabilities; c.humanBaseline != null} | {ref |
	some ref, by_version in object.get(d, "versions", {})
	some c in by_version
	c.humanBaseline != null
}

# The grants of org filed under their ref's catalog biome, by ref.
declared_grants(d, org) := {ref: g |
	some ref, c in d.capabilities
	g := d.grants[ref][c.biome.id][org]
}

cap_fields := {"callerConstraint", "humanBaseline", "instanceGrade", "lifecycle", "outputClassification", "requiredBindings", "safeForAgents"}

grant_fields := {"audience", "biomeVersion", "environments", "org", "profile", "subjects"}

group(d, ref, g) := {
	"catalog": object.filter(d.capabilities[ref], cap_fields),
	"grant": object.filter(g, grant_fields),
	"refs": {ref: true},
	"versions": {v: cut_descriptor(c) | v := g.biomeVersion; c := object.get(d, "versions", {})[ref][v]},
}

cut_descriptor(c) := object.filter(c, cap_fields) if is_object(c)

cut_descriptor(c) := c if not is_object(c)

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

clean_with(inp, d) := clean_indexed(inp, d, index(d))

# clean_indexed is the clean set over d with the index i (a hand-built grouping, say).
clean_indexed(inp, d, i) := s if {
	s := data.xema.authz.search_sets.clean with input as inp
		with data.xema.environments as d.environments
		with data.xema.audience as d.audience
		with data.xema.profiles as d.profiles
		with data.xema.capabilities as d.capabilities
		with data.xema.grants as d.grants
		with data.xema.versions as object.get(d, "versions", {})
		with data.xema.grantedTo as i.grantedTo
		with data.xema.baselined as i.baselined
		with data.xema.groupedTo as i.groupedTo
		with data.xema.searchGroups as i.searchGroups
}

clean(inp) := clean_with(inp, authz.fixture)

# Every ref of the clean set is allowed: the property internal/policy checks over its corpus,
# here over the fixture's refs for callers that meet each of its rules.
test_search_clean_is_allowed if {
	callers := [
		caller,
		object.union(caller, {"groups": [], "roles": []}),
		object.union(caller, {"environment": "public-session"}),
		object.union(caller, {"environment": "app"}),
		object.union(caller, {"armed": ["kb:*"]}),
		object.union(caller, {"subject": {"kind": "workflow", "ref": "workflow:w1"}}),
		object.union(caller, {"bindings": {"repository/writer": true, "channel/poster/main": true}}),
		object.remove(authz.user("alice", "org_admin"), ["ref", "resource"]),
		object.remove(authz.user("bob", "org_member"), ["ref", "resource"]),
	]
	every inp in callers {
		every ref in clean(inp) {
			authz.decide(object.union(inp, {"ref": ref})).allow
		}
	}
}

test_search_clean_admits_granted_refs if {
	s := clean(caller)
	"kb:page.read@1" in s
	"kb:legacy.read@1" in s # deprecated is still invocable
	not "kb:old.read@1" in s # retired
	not "kb:draft.read@1" in s
	not "kb:secret.read@1" in s # not safe for agents
	not "workflow:run.start@1" in s # workflow steps only
	not "connector:scm.create-pull-request@1" in s # bindings missing
	not "doc:page.share@1" in s # instance grade
	not "kb:scoped.read@1" in s # granted to another biome
	not "biome:install@1" in s # no grant
	"workflow:run.start@1" in clean(object.union(caller, {"subject": {"kind": "workflow", "ref": "workflow:w1"}}))
	"connector:scm.create-pull-request@1" in clean(object.union(caller, {"bindings": {"repository/writer": true, "channel/poster/main": true}}))
}

test_search_clean_environments_and_audience if {
	public := clean(object.union(caller, {"environment": "public-session"}))
	"kb:public.read@1" in public
	not "kb:unclassified.read@1" in public # unclassified is internal
	not "kb:page.read@1" in public # not granted there
	count(clean(object.union(caller, {"environment": "mars"}))) == 0
	d := authz.with_grants({"kb:page.read@1": {"demo": authz.org_grant({"environments": null, "audience": {"public": true}})}})
	not "kb:page.read@1" in clean_with(caller, d) # the grant's audience refuses internal output
	from_profile := authz.with_grants({"kb:page.read@1": {"demo": authz.org_grant({"environments": null})}})
	"kb:page.read@1" in clean_with(object.union(caller, {"environment": "app"}), from_profile)
	not "kb:page.read@1" in clean_with(object.union(caller, {"environment": "org"}), from_profile)
}

test_search_clean_subjects if {
	named := authz.with_grants({"kb:page.read@1": {"demo": authz.org_grant({"subjects": {"agent:support-bot": true, "group:support": false}})}})
	"kb:page.read@1" in clean_with(caller, named)
	refused := authz.with_grants({"kb:page.read@1": {"demo": authz.org_grant({"subjects": {"agent:support-bot": false, "group:support": false, "role:reader": true}})}})
	"kb:page.read@1" in clean_with(caller, refused) # by role
	not "kb:page.read@1" in clean_with(object.union(caller, {"roles": []}), refused)
	by_group := authz.with_grants({"kb:page.read@1": {"demo": authz.org_grant({"subjects": {"group:support": true}})}})
	"kb:page.read@1" in clean_with(caller, by_group)
}

test_search_clean_explicit_only if {
	alice := object.remove(authz.user("alice", "org_member"), ["ref", "resource"])
	"kb:admin.purge@1" in clean(alice)
	bob := object.remove(authz.user("bob", "org_member"), ["ref", "resource"])
	d := authz.with_grants({"kb:admin.purge@1": {"demo": authz.org_grant({})}})
	not "kb:admin.purge@1" in clean_with(bob, d) # subjects null names no one
}

test_search_clean_pinned_version if {
	d := object.union(authz.fixture, {"versions": {"kb:page.read@1": {"1.0.0": authz.capability({"safeForAgents": false})}}})
	not "kb:page.read@1" in clean_with(caller, d)
}

test_search_clean_org_of_the_grant if {
	d := authz.with_grants({"kb:page.read@1": {"demo": authz.org_grant({"org": "globex"})}})
	not "kb:page.read@1" in clean_with(caller, d)
}

test_search_clean_caller_conditions if {
	count(clean(caller)) > 0
	count(clean(object.union(caller, {"resource": "kb/pages/welcome"}))) == 0
	count(clean(object.union(caller, {"biome": "demo"}))) == 0
	count(clean(object.union(caller, {"usage": {"rateExceeded": true}}))) == 0
	count(clean(object.union(caller, {"usage": {"quotaExceeded": true}}))) == 0
	count(clean(object.union(caller, {"approval": {"requester": "agent:x", "approvalId": "a1"}}))) == 0
	count(clean(object.union(caller, {"armed": []}))) == 0
	count(clean(object.union(caller, {"org": ""}))) == 0
}

test_search_clean_platform_deny if {
	s := clean(caller) with data.xema.custom.deny as {{"code": "PLATFORM_BLOCKED"}}
	count(s) == 0
}

# A group's values are decided once for all its refs, the armed globs per ref (the refs' own
# data is not read: kb:page.find@1 is not even in the catalog).
test_search_clean_group_of_refs if {
	i := index(authz.fixture)
	read := i.searchGroups.acme["kb:page.read@1"]
	grouped := json.patch(i, [
		{"op": "add", "path": "/searchGroups/acme/kb:page.read@1/refs", "value": {"kb:page.read@1": true, "kb:page.find@1": true, "doc:page.find@1": true}},
		{"op": "remove", "path": "/searchGroups/acme/kb:legacy.read@1"},
	])
	s := clean_indexed(caller, authz.fixture, grouped)
	{"kb:page.read@1", "kb:page.find@1", "doc:page.find@1"} - s == set()
	not "kb:legacy.read@1" in s # its group is gone: decided one by one
	kb := clean_indexed(object.union(caller, {"armed": ["kb:page.*", "nothing"]}), authz.fixture, grouped)
	{"kb:page.read@1", "kb:page.find@1"} - kb == set()
	not "doc:page.find@1" in kb
	read.refs == {"kb:page.read@1": true}
}

test_search_clean_empty_ref if {
	i := index(authz.fixture)
	with_empty := json.patch(i, [{"op": "add", "path": "/searchGroups/acme/kb:page.read@1/refs/", "value": true}])
	with_empty.searchGroups.acme["kb:page.read@1"].refs[""]
	s := clean_indexed(caller, authz.fixture, with_empty)
	"kb:page.read@1" in s
	not "" in s
	globbed := clean_indexed(object.union(caller, {"armed": ["*", "kb:*"]}), authz.fixture, with_empty)
	"kb:page.read@1" in globbed
	not "" in globbed
	by_pattern := clean_indexed(object.union(caller, {"armed": ["kb:*", "*"]}), authz.fixture, with_empty)
	by_pattern == globbed
	other := clean_indexed(object.union(caller, {"armed": ["k*"]}), authz.fixture, with_empty)
	"kb:page.read@1" in other
	not "" in other
}

# Without the search groups (data built before them; null stands for absent, which `with`
# cannot say), nothing is clean: every ref of the cut is decided.
test_search_clean_without_groups if {
	i := object.union(index(authz.fixture), {"groupedTo": null, "searchGroups": null})
	count(clean_indexed(caller, authz.fixture, i)) == 0
}

test_search_group_cap if {
	c := {"lifecycle": "published"}
	p := {"lifecycle": "retired"}
	data.xema.authz.search_group_cap({"catalog": c, "grant": {"biomeVersion": "0.9.0"}, "versions": {"0.9.0": p}}) == p
	data.xema.authz.search_group_cap({"catalog": c, "grant": {"biomeVersion": "1.0.0"}, "versions": {"0.9.0": p}}) == c
	data.xema.authz.search_group_cap({"catalog": c, "grant": {}, "versions": {}}) == c
}

# Platform Rego is asked per ref only where it exists: data.xema.custom is defined (if empty)
# with it, whatever its rules answer. (Without it, data.xema.custom is undefined, which no
# `with` can make it: a platform team's `xema policy test --with-builtin` runs this test with
# its modules loaded. internal/policy's TestSearchableIsSound covers the case without.)
test_search_platform if {
	data.xema.authz.search_platform with data.xema.custom as {}
	s := clean(caller)
	count(s) > 0
	clean(caller) with data.xema.custom as {} == s
	clean(caller) with data.xema.custom.deny as set() == s
}

# The indexes are sets (objects): data indexed as lists, as before they were, has no first
# cut, so search decides every ref rather than reading lists as empty sets.
test_search_cut_needs_set_indexes if {
	not data.xema.authz.search_cut with input as caller
		with data.xema.grantedTo as {"acme": {"*": ["kb:page.read@1"]}}
		with data.xema.baselined as []
	cut := data.xema.authz.search_cut with input as caller
		with data.xema.grantedTo as {"acme": {"*": {"kb:page.read@1": true}}}
		with data.xema.baselined as {"biome:install@1": true}
	cut == {"kb:page.read@1"}
	user := data.xema.authz.search_cut with input as object.remove(authz.user("bob", "org_member"), ["ref", "resource"])
		with data.xema.grantedTo as {"acme": {"*": {"kb:page.read@1": true}}}
		with data.xema.baselined as {"biome:install@1": true}
	user == {"kb:page.read@1", "biome:install@1"}
}
