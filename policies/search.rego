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
search_cut := searchable if is_object(data.xema.grantedTo)

searchable contains ref if {
	some key in caller_keys
	some ref in data.xema.grantedTo[input.org][key]
}

searchable contains ref if {
	input.subject.kind == "user"
	some ref in data.xema.baselined
}

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
search_sets := {"cut": searchable, "clean": search_clean} if is_object(data.xema.grantedTo)

# search_clean is clean written per ref for a caller as search asks (no resource, no biome):
# evaluating clean itself once per ref (`with input.ref as ref`) re-evaluates its helper
# rules and costs about what a decision does (~0.5 ms a ref). Like clean, each condition is at
# least as strict as the deny rule it stands for (a new deny rule must be mirrored here too):
# internal/policy's TestSearchableIsSound checks that every ref in it is allowed, over the
# decision corpus.
search_clean contains ref if {
	search_caller_clean
	some ref in searchable
	search_ref_clean(ref)
}

# The conditions of clean that read only the caller.
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

search_ref_clean(ref) if {
	is_string(ref)
	ref != ""
	catalog := data.xema.capabilities[ref]
	g := data.xema.grants[ref][catalog.biome.id][input.org]
	search_armed(ref)
	c := search_cap(ref, g.biomeVersion, catalog)

	# Only the fields read: OPA remembers a function's result per arguments, so refs
	# sharing a descriptor and a grant (an install's refs) are checked once.
	search_admits(object.filter(c, search_cap_fields), object.filter(g, search_grant_fields))
	not search_custom_denies(ref)
}

search_cap_fields := {"lifecycle", "safeForAgents", "callerConstraint", "requiredBindings", "instanceGrade", "outputClassification", "humanBaseline"}

search_grant_fields := {"org", "subjects", "audience", "environments", "profile"}

# cap of authz.rego: the version the grant pins, else the catalog's.
search_cap(ref, version, catalog) := c if {
	c := data.xema.versions[ref][version]
} else := catalog

search_armed(ref) if {
	some pattern in input.armed
	glob.match(pattern, null, ref)
}

search_custom_denies(ref) if {
	some _ in data.xema.custom.deny with input.ref as ref
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
