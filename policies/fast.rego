package xema.authz

# The allow path, written positively so the common call is cheap to decide.
#
# `clean` holds when no `deny` rule can fire: it is the conjunction of the negations of every
# deny rule's body (checks.rego, grant.rego, baseline.rego, approval.rego, delegation.rego, connection.rego, authz.rego and the
# platform's data.xema.custom.deny), each written at least as strictly as the rule it
# stands for. When it holds, the decision is clean_decision (authz.rego), which evaluates no
# deny rule; when it does not, full_decision is computed. So `clean` may be stricter than
# "no deny fires" (the call then takes the full path and is decided the same way), never
# looser.
#
# clean is also written for partial evaluation (internal/policy/fast.go): the engine
# evaluates it per (ref, org, biome) with the rest of the input unknown. A lookup of an
# unknown key in known data (`obj[input.x]`) is expanded there into one alternative per
# key of obj, so clean tests membership in sets computed from the data instead
# (`input.x in set`, one call in the residual), and subject coverage is one rule the engine
# keeps whole (not inlined into every alternative).
#
# A new deny rule must be mirrored here: internal/policy's TestCleanIsSound checks, over the
# decision cases and their one-field mutations, that `clean` never holds while a deny rule
# fires, and TestDenyRulesAccountedFor fails when the number of deny rules changes.
clean if {
	# authz.rego: well-formed input, no platform denial, not deciding a held call.
	is_string(input.ref)
	input.ref != ""
	is_string(input.environment)
	input.environment != ""
	is_string(input.org)
	input.org != ""
	is_string(input.subject.kind)
	input.subject.kind != ""
	is_string(input.subject.ref)
	input.subject.ref != ""
	is_array(input.armed)
	not custom_denies
	not approval_key

	# checks.rego; the environment is defined, admits the output and is granted (below).
	cap.lifecycle in invocable_lifecycle
	input.environment in clean_environments
	armed
	not unsafe_for_agent
	not caller_constraint_unmet
	not missing_binding
	not is_object(cap.instanceGrade)
	not input.usage.rateExceeded == true
	not input.usage.quotaExceeded == true

	# grant.rego: the grant path passes (a human holding the capability by baseline
	# without a grant takes the full path).
	object.get(grant, "org", "") == input.org
	clean_subject_covered
	not resource_outside_grant
	not resource_not_owned
	not grant_audience_denied

	# baseline.rego: with a grant, only explicit-only can deny.
	not explicit_only_uncovered

	# delegation.rego: an undelegated call, or one every delegation rule admits.
	not delegation_denied

	# connection.rego: no connection needed, or a connected one.
	not connection_blocked
}

# Two bodies, each testing that a connection is present by a test partial evaluation keeps
# (it drops a lone `_ = input.connection` from a negated single-body rule).
connection_blocked if {
	is_object(input.connection)
	not connection_connected
}

connection_blocked if {
	connection_needed
	not is_object(input.connection)
}

connection_connected if input.connection.status == "connected"

# The environments a clean call may name: env_kind is defined (ENVIRONMENT_NOT_ALLOWED),
# the audience of its kind admits the output (AUDIENCE_INCOMPATIBLE) and the grant names it
# (ENVIRONMENT_NOT_ALLOWED of grant.rego).
clean_environments contains name if {
	some name, env in data.xema.environments
	env.kind
	not kind_audience_denied(env.kind)
	grant_environments[name]
}

kind_audience_denied(kind) if {
	admitted := data.xema.audience[kind]
	not admitted[classification]
}

# subject_covered, by membership in the subjects the grant names (see granted_subjects).
clean_subject_covered if grant.subjects == null

clean_subject_covered if clean_explicitly_covered

clean_explicitly_covered if input.subject.ref in granted_subjects

clean_explicitly_covered if {
	some g in input.groups
	concat(":", ["group", g]) in granted_subjects
}

clean_explicitly_covered if {
	some r in input.roles
	concat(":", ["role", r]) in granted_subjects
}

# The keys k for which grant.subjects[k] holds (a value other than false).
granted_subjects contains k if {
	is_object(grant.subjects)
	some k, on in grant.subjects
	on != false
}

# Not delegation_malformed nor actor_not_allowed, but one positive test of the shape and the
# actor: a delegated call's residual then evaluates one rule body, not one a field.
delegation_denied if {
	delegated
	not delegation_admitted
}

delegation_admitted if {
	is_string(input.delegation.person.ref)
	input.delegation.person.ref != ""
	is_array(input.delegation.actors)
	delegation_actor_admitted
}

# mayAct null admits any actor; a list, those it names; anything else none.
delegation_actor_admitted if input.delegation.mayAct == null

delegation_actor_admitted if {
	is_array(input.delegation.mayAct)
	input.subject.ref in input.delegation.mayAct
}

delegation_denied if {
	delegated
	not cap.delegable == true
}

delegation_denied if {
	delegated
	not person_allowed
}

custom_denies if {
	some _ in data.xema.custom.deny
}

approval_key if {
	_ = input.approval
}

unsafe_for_agent if {
	cap.safeForAgents == false
	input.subject.kind == "agent"
}

caller_constraint_unmet if {
	cap.callerConstraint == "workflow-step"
	input.subject.kind != "workflow"
}

# Through bound (checks.rego): `not input.bindings[binding_key(b.roleKey)]` is not true,
# but undefined, when b has no roleKey, and a malformed requirement would then be clean.
missing_binding if {
	some b in cap.requiredBindings
	not bound(b)
}

resource_outside_grant if {
	is_array(grant.resources)
	object.get(input, "resource", object.get(cap, "resource", "")) != ""
	not resource_granted
}

resource_not_owned if {
	cap.reach == "owner"
	is_string(input.resource)
	object.get(input, ["resourceOwner"], "") != resource_owner_subject
}

grant_audience_denied if {
	is_object(grant.audience)
	not grant.audience[classification]
}

explicit_only_uncovered if {
	input.subject.kind == "user"
	baseline.kind == "explicit-only"
	not clean_explicitly_covered
}
