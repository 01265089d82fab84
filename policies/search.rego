package xema.authz

# Search's first cut: the refs a caller (the input without ref and resource) could be
# admitted to, computed once per caller and revision, so a search decides only those. It is
# a superset of {ref | allow}: a call is allowed only through a grant of the caller's org
# whose subjects cover the caller (grant.rego) or through a human baseline (baseline.rego);
# every other ref would be denied, and search skips it without a decision.
# internal/policy's TestSearchableIsSound checks allow => ref in searchable over the
# decision corpus. It reads the index of data.xema.grantedTo and data.xema.baselined
# (grant.Index), so it costs what it returns, not the number of grants.
# search_cut is searchable when data.xema carries the index, else undefined: a search then
# decides every ref instead of showing nothing.
# The indexes are sets of refs (objects): data indexed as lists (before they were sets) has
# no first cut either.
search_cut := searchable if search_indexed

search_indexed if {
	is_object(data.xema.grantedTo)
	is_object(data.xema.baselined)
}

# Each index entry is taken whole (object.keys, union), in built-in calls: iterating it
# costs an expression a ref.
searchable := union({object.keys(data.xema.grantedTo[input.org][key]) | some key in caller_keys} | search_baselined)

default search_baselined := set()

search_baselined := {object.keys(data.xema.baselined)} if input.subject.kind == "user"

# The subjects keys a grant covering the caller names (subject_covered of grant.rego);
# "*" stands for subjects null.
caller_keys contains "*"

caller_keys contains input.subject.ref

caller_keys contains concat(":", ["group", g]) if some g in input.groups

caller_keys contains concat(":", ["role", r]) if some r in input.roles

# search_sets is, with the first cut, the refs of it whose call by this caller meets clean's
# conditions (fast.rego), so allowed: search shows those without a decision and decides the
# rest of the cut one by one. The engine asks for it only while the bundle's Rego is the
# embedded policy's (plus platform Rego, whose deny set it evaluates per ref): search_clean
# stands for the deny rules of that policy.
search_sets := {"cut": searchable, "clean": search_clean} if search_indexed

# search_clean is clean written for a caller as search asks (no resource, no biome), per
# group of refs (data.xema.searchGroups, built with the other indexes by internal/grant):
# the conditions on the descriptor and the grant are evaluated once per group, on the
# group's copy of the fields they read, and only the armed globs and the platform's deny
# rules per ref. (Evaluating clean itself per ref, `with input.ref as ref`, costs about what
# a decision does, ~0.5 ms a ref; reading each ref's own descriptor and grant ~90 µs.) Like
# clean, each condition is at least as strict as the deny rule it stands for (a new deny
# rule must be mirrored here too): internal/policy's TestSearchableIsSound checks that every
# ref in it is allowed, over the decision corpus, and TestSearchGroupsSplitOnEveryField that
# the groups split on every field read here.
search_clean := search_armed_clean if not search_platform

search_clean := {ref | some ref in search_armed_clean; not search_platform_denies(ref)} if search_platform

# The refs of the clean groups the caller is armed for. A caller armed with "*" is armed for
# every ref (glob.match("*", null, ref) holds for any string): the groups' sets of refs are
# then taken whole, in built-in calls, rather than a ref at a time.
default search_armed_clean := set()

search_armed_clean := union({object.keys(data.xema.searchGroups[input.org][id].refs) | some id in search_clean_groups}) - {""} if {
	search_caller_clean
	"*" in input.armed
}

search_armed_clean := {ref |
	some id in search_clean_groups
	some ref, _ in data.xema.searchGroups[input.org][id].refs
	ref != ""
	some pattern in input.armed
	glob.match(pattern, null, ref)
} if {
	search_caller_clean
	not "*" in input.armed
}

# The groups filed under a subject key of the caller whose values meet clean's conditions.
search_clean_groups contains id if {
	some key in caller_keys
	some id in data.xema.groupedTo[input.org][key]
	group := data.xema.searchGroups[input.org][id]
	search_admits(search_group_cap(group), group.grant)
}

# The conditions of clean that read only the caller. A delegated caller's refs are decided
# one by one (delegation.rego reads the person and each capability's delegable).
search_caller_clean if {
	is_string(input.environment)
	input.environment != ""
	is_string(input.org)
	input.org != ""
	is_string(input.subject.kind)
	input.subject.kind != ""
	is_string(input.subject.ref)
	input.subject.ref != ""
	is_array(input.armed)
	not approval_key
	not delegated
	not connection_blocked
	not input.usage.rateExceeded == true
	not input.usage.quotaExceeded == true
	not search_names_resource
	not search_names_biome
}

# A named resource is checked against grants and owners: search_clean admits none. (A
# helper rule, as search_instance_graded.)
search_names_resource if is_string(input.resource)

search_names_biome if {
	is_string(input.biome)
	input.biome != ""
}

# cap of authz.rego: the version the grant pins, else the catalog's.
search_group_cap(group) := c if {
	c := group.versions[group.grant.biomeVersion]
} else := group.catalog

# The platform's deny set for one ref (custom_denies of fast.rego).
search_platform_denies(ref) if {
	some _ in data.xema.custom.deny with input.ref as ref
}

# Whether there is platform Rego (or data) to ask per ref: a module of package xema.custom
# makes data.xema.custom an object, if an empty one, whatever the input; without one it is
# undefined, and so is data.xema.custom.deny for every ref.
search_platform if {
	_ = data.xema.custom
}

# The conditions of clean that read the capability c and the grant g.
search_admits(c, g) if {
	c.lifecycle in invocable_lifecycle
	not search_unsafe_for_agent(c)
	not search_caller_constraint_unmet(c)
	not search_missing_binding(c)
	not search_instance_graded(c)
	object.get(g, "org", "") == input.org
	search_subject_covered(g)
	not search_audience_denied(c, g)
	search_environment_admits(c, g)
	not search_explicit_only_uncovered(c, g)
}

# A helper rule: `not is_object(c.instanceGrade)` inline is never true when c has no
# instanceGrade (OPA evaluates the argument outside the negation).
search_instance_graded(c) if is_object(c.instanceGrade)

search_unsafe_for_agent(c) if {
	c.safeForAgents == false
	input.subject.kind == "agent"
}

search_caller_constraint_unmet(c) if {
	c.callerConstraint == "workflow-step"
	input.subject.kind != "workflow"
}

search_missing_binding(c) if {
	some b in c.requiredBindings
	not bound(b)
}

search_classification(c) := c.outputClassification if {
	is_string(c.outputClassification)
	c.outputClassification != ""
} else := "internal"

search_audience_denied(c, g) if {
	is_object(g.audience)
	not g.audience[search_classification(c)]
}

# input.environment in clean_environments.
search_environment_admits(c, g) if {
	env := data.xema.environments[input.environment]
	env.kind
	not search_kind_audience_denied(env.kind, c)
	search_grant_environments(g)[input.environment]
}

search_kind_audience_denied(kind, c) if {
	admitted := data.xema.audience[kind]
	not admitted[search_classification(c)]
}

search_grant_environments(g) := g.environments if {
	is_object(g.environments)
} else := data.xema.profiles[g.profile].environments

search_subject_covered(g) if g.subjects == null

search_subject_covered(g) if search_explicitly_covered(g)

# clean_explicitly_covered: a subject key of the grant with a value other than false.
search_explicitly_covered(g) if {
	is_object(g.subjects)
	g.subjects[input.subject.ref] != false
}

search_explicitly_covered(g) if {
	is_object(g.subjects)
	some grp in input.groups
	g.subjects[concat(":", ["group", grp])] != false
}

search_explicitly_covered(g) if {
	is_object(g.subjects)
	some r in input.roles
	g.subjects[concat(":", ["role", r])] != false
}

search_explicit_only_uncovered(c, g) if {
	input.subject.kind == "user"
	c.humanBaseline.kind == "explicit-only"
	not search_explicitly_covered(g)
}
