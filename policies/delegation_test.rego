package xematest.authz

# delegation.rego: an actor (input.subject) acting for a person (input.delegation).

delegable(over) := shallow(fixture, {"capabilities": shallow(fixture.capabilities, over)})

# The fixture with kb:page.read@1, kb:mine.read@1, kb:page.publish@1 (granted) and
# kb:admin.purge@1 delegable.
delegation_fixture := shallow(delegable_caps, {"grants": shallow(fixture.grants, {"kb:page.publish@1": {"demo": org_grant({"subjects": {"agent:support-bot": true}})}})})

delegable_caps := delegable({
	"kb:page.read@1": capability({"delegable": true}),
	"kb:mine.read@1": capability({"delegable": true, "reach": "owner"}),
	"kb:page.publish@1": capability({"delegable": true, "humanBaseline": {"kind": "org-role", "minimumOrgRole": "org_admin", "environments": ["project"]}}),
	"kb:admin.purge@1": capability({"delegable": true, "humanBaseline": {"kind": "explicit-only"}}),
})

# for_person(inp, person, role) is inp made by its subject for user:person of org role role;
# the actor keeps no groups, roles or org role of its own (identity's delegate).
for_person(inp, name, role) := object.union(
	object.remove(inp, ["orgRole"]),
	{"groups": [], "roles": [], "delegation": {
		"person": {"kind": "user", "ref": concat(":", ["user", name])}, "orgRole": role,
		"groups": ["support"], "roles": [], "actors": [inp.subject.ref], "mayAct": null,
	}},
)

decide_delegated(inp) := decide_with(inp, delegation_fixture)

test_delegated_call_allowed if {
	dec := decide_delegated(for_person(agent, "ann", "org_member"))
	dec.allow == true
}

test_not_delegable if {
	# kb:page.read@1 of the plain fixture does not declare delegable.
	dec := decide(for_person(agent, "ann", "org_member"))
	dec.allow == false
	codes(dec) == {"NOT_DELEGABLE"}
	some r in dec.reasons
	contains(r.detail, "user:ann may call it themselves")
}

test_may_act_names_the_actor if {
	inp := for_person(agent, "ann", "org_member")
	dec := decide_delegated(object.union(inp, {"delegation": {"mayAct": ["agent:support-bot"]}}))
	dec.allow == true
}

test_may_act_excludes_the_actor if {
	inp := for_person(agent, "ann", "org_member")
	dec := decide_delegated(object.union(inp, {"delegation": {"mayAct": ["agent:other"]}}))
	codes(dec) == {"ACTOR_NOT_ALLOWED"}
}

test_empty_may_act_allows_none if {
	inp := for_person(agent, "ann", "org_member")
	dec := decide_delegated(object.union(inp, {"delegation": {"mayAct": []}}))
	codes(dec) == {"ACTOR_NOT_ALLOWED"}
}

# The grant names only the actor; the person holds the capability by baseline only.
test_person_below_baseline if {
	inp := object.union(agent, {"ref": "kb:page.publish@1"})
	codes(decide_delegated(for_person(inp, "ann", "org_member"))) == {"PERSON_NOT_ALLOWED"}
	decide_delegated(for_person(inp, "root", "org_admin")).allow == true
}

# explicit-only: the grant must name the person.
test_person_explicit_only if {
	inp := object.union(agent, {"ref": "kb:admin.purge@1"})
	d := shallow(delegation_fixture, {"grants": shallow(delegation_fixture.grants, {"kb:admin.purge@1": {"demo": org_grant({"subjects": {"user:alice": true, "agent:support-bot": true}})}})})
	decide_with(for_person(inp, "alice", "org_member"), d).allow == true
	codes(decide_with(for_person(inp, "bob", "org_member"), d)) == {"PERSON_NOT_ALLOWED"}
}

# The actor's grant still decides: a grant naming only the person does not cover the agent.
test_grant_must_cover_the_actor if {
	d := shallow(delegation_fixture, {"grants": shallow(delegation_fixture.grants, {"kb:page.read@1": {"demo": org_grant({"subjects": {"user:ann": true}})}})})
	codes(decide_with(for_person(agent, "ann", "org_member"), d)) == {"SUBJECT_NOT_COVERED"}
}

# reach owner: the resource must be the person's, not the actor's.
test_owned_by_the_person if {
	inp := object.union(agent, {"ref": "kb:mine.read@1", "resourceOwner": "user:ann"})
	decide_delegated(for_person(inp, "ann", "org_member")).allow == true
	codes(decide_delegated(for_person(object.union(inp, {"resourceOwner": "agent:support-bot"}), "ann", "org_member"))) == {"RESOURCE_NOT_REACHABLE"}
}

test_malformed_delegation if {
	dec := decide_delegated(object.union(agent, {"delegation": "user:ann"}))
	dec.allow == false
	"INVALID_INPUT" in codes(dec)
}
