package xema.authz

# Acting for a person (docs/identity.md, "Acting for a person"). A token whose act claim
# says an actor acts for a person gives the call input.delegation: input.subject is then the
# actor (the outermost of the chain), whose grant covers the call like any caller's
# (grant.rego); and the person must hold the capability too, the capability must be
# delegable, and the person's token may limit who acts for them (mayAct).

# Like approval_key: `_ = input.delegation` holds for any value, so a malformed delegation
# is still a delegated call.
delegated if {
	_ = input.delegation
}

# Two exclusive rules rather than an else, which partial evaluation would keep as a
# reference to the policy (grant.rego's grant_environments).
delegation_person := input.delegation.person.ref if is_string(input.delegation.person.ref)

delegation_person := "(the person not named)" if not is_string(input.delegation.person.ref)

deny contains {"code": "INVALID_INPUT", "detail": "input.delegation must name the person (person.ref), the actors and mayAct as null or an array"} if {
	delegated
	delegation_malformed
}

delegation_malformed if not is_object(input.delegation)

delegation_malformed if {
	is_object(input.delegation)
	not non_empty_string(object.get(input.delegation, ["person", "ref"], null))
}

delegation_malformed if {
	is_object(input.delegation)
	not is_array(object.get(input.delegation, "actors", null))
}

delegation_malformed if {
	m := input.delegation.mayAct
	m != null
	not is_array(m)
}

deny contains {"code": "NOT_DELEGABLE", "detail": sprintf("%s is not delegable: %s may call it themselves, not through %s", [input.ref, delegation_person, input.subject.ref])} if {
	delegated
	cap
	not cap.delegable == true
}

deny contains {"code": "ACTOR_NOT_ALLOWED", "detail": sprintf("%s's token allows only %v to act for them, not %s", [delegation_person, input.delegation.mayAct, input.subject.ref])} if {
	delegated
	actor_not_allowed
}

actor_not_allowed if {
	is_array(input.delegation.mayAct)
	not input.subject.ref in input.delegation.mayAct
}

deny contains {"code": "PERSON_NOT_ALLOWED", "detail": sprintf("%s, for whom %s acts, does not hold %s: neither their org role meets its baseline nor does its grant cover them", [delegation_person, input.subject.ref, input.ref])} if {
	delegated
	cap
	not person_allowed
}

# The person holds the capability as a call of their own would: by their human baseline,
# or through the grant (one covering everyone, or naming them, a group or a role of theirs;
# explicit-only needs the naming).
person_allowed if person_baseline_met

person_allowed if {
	grant
	person_covered
	not person_explicit_only_uncovered
}

person_baseline_met if {
	input.delegation.person.kind == "user"
	baseline.kind in baseline_role_kinds
	env_kind in baseline.environments
	org_role_rank[input.delegation.orgRole] >= org_role_rank[minimum_org_role]
}

person_covered if grant.subjects == null

person_covered if person_explicitly_covered

person_explicitly_covered if grant.subjects[input.delegation.person.ref]

person_explicitly_covered if {
	some g in input.delegation.groups
	grant.subjects[concat(":", ["group", g])]
}

person_explicitly_covered if {
	some r in input.delegation.roles
	grant.subjects[concat(":", ["role", r])]
}

person_explicit_only_uncovered if {
	baseline.kind == "explicit-only"
	not person_explicitly_covered
}

# reach "owner" of a delegated call: the resource must be the person's (grant.rego's rule
# compares with the caller; the actor owns nothing of the person's).
resource_owner_subject := delegation_person if delegated

resource_owner_subject := input.subject.ref if not delegated
