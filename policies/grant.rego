package xema.authz

# The grant path: checks against the biome's install grant. A human who meets the
# capability's org-role or org-administrators baseline holds it without a grant.

grant_required if {
	cap
	not human_baseline_met
}

deny contains {"code": "MISSING_GRANT", "detail": sprintf("%s is not granted to biome %s", [input.ref, grant_biome])} if {
	grant_required
	not grant
	grant_biome != builtin_biome
}

# The gateway's own capabilities are never granted: say so, rather than name a grant that
# cannot exist.
deny contains {"code": "MISSING_GRANT", "detail": sprintf("%s is the gateway's own (biome %s): never granted, held only by people of an org role", [input.ref, builtin_biome])} if {
	grant_required
	not grant
	grant_biome == builtin_biome
}

# Defence in depth: a grant filed under the caller's org must also name it.
deny contains {"code": "GRANT_ORG_MISMATCH", "detail": sprintf("the grant of %s belongs to another org", [input.ref])} if {
	grant_required
	grant
	object.get(grant, "org", "") != input.org
}

# Two exclusive rules rather than an else: partial evaluation (internal/policy/fast.go)
# folds them for a key, where an else is kept as a reference to the policy. The negation
# goes through a rule: for a grant without the key, the fast path's residual of
# `not is_object(grant.environments)` did not hold (a denial, ENVIRONMENT_NOT_ALLOWED) where
# plain evaluation held it; such a grant takes its profile's environments, as the else did
# (TestSearchableIsSound's corpus has one).
grant_environments := grant.environments if grant_names_environments

grant_environments := profile.environments if not grant_names_environments

grant_names_environments if is_object(grant.environments)

deny contains {"code": "ENVIRONMENT_NOT_ALLOWED", "detail": sprintf("%s is not granted in %s", [input.ref, input.environment])} if {
	grant_required
	grant
	env_kind
	not grant_environments[input.environment]
}

deny contains {"code": "SUBJECT_NOT_COVERED", "detail": sprintf("%s is not granted to %s", [input.ref, input.subject.ref])} if {
	grant_required
	grant
	not subject_covered
}

subject_covered if grant.subjects == null

subject_covered if explicitly_covered

explicitly_covered if grant.subjects[input.subject.ref]

explicitly_covered if {
	some g in input.groups
	grant.subjects[concat(":", ["group", g])]
}

explicitly_covered if {
	some r in input.roles
	grant.subjects[concat(":", ["role", r])]
}

# A grant's resources bind a call that names a resource, and one whose capability declares a
# resource property (x-xema-resource, cap.resource) it left out: that call names none of them.
deny contains {"code": "RESOURCE_NOT_REACHABLE", "detail": sprintf("%s is outside the resources granted for %s", [named_resource, input.ref])} if {
	grant_required
	is_array(grant.resources)
	object.get(input, "resource", object.get(cap, "resource", "")) != ""
	not resource_granted
}

named_resource := object.get(input, "resource", sprintf("a call naming no %s", [object.get(cap, "resource", "")]))

resource_granted if {
	some pattern in grant.resources
	glob.match(pattern, ["/"], input.resource)
}

# reach "owner": the named resource must belong to the caller (to the person of a delegated
# call, delegation.rego).
deny contains {"code": "RESOURCE_NOT_REACHABLE", "detail": sprintf("%s is not owned by %s", [input.resource, resource_owner_subject])} if {
	cap.reach == "owner"
	is_string(input.resource)
	object.get(input, ["resourceOwner"], "") != resource_owner_subject
}

deny contains {"code": "AUDIENCE_INCOMPATIBLE", "detail": sprintf("the grant for %s does not admit %s output", [input.ref, classification])} if {
	grant_required
	is_object(grant.audience)
	not grant.audience[classification]
}
