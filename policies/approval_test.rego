package xematest.authz

# Deciding a held call: input.approval names its requester.

held_by(inp, requester) := object.union(inp, {"approval": {"requester": requester, "approvalId": "apr_1", "org": inp.org}})

test_approver_covered_may_decide if {
	decide(held_by(user("alice", "org_admin"), "agent:support-bot")).allow == true
}

test_own_approval_denied if {
	denied_only_by(held_by(user("bob", "org_member"), "user:bob"), "OWN_APPROVAL")
}

test_own_approval_detail_names_the_call if {
	dec := decide(held_by(user("bob", "org_member"), "user:bob"))
	some r in dec.reasons
	r.code == "OWN_APPROVAL"
	contains(r.detail, "apr_1")
}

test_agent_approver_denied if {
	denied_only_by(held_by(object.union(agent, {"subject": {"kind": "agent", "ref": "agent:helper"}}), "agent:support-bot"), "APPROVER_NOT_HUMAN")
}

test_agent_approving_itself_gets_both if {
	codes(decide(held_by(agent, "agent:support-bot"))) == {"OWN_APPROVAL", "APPROVER_NOT_HUMAN"}
}

test_approval_without_requester_denied if {
	denied_only_by(object.union(user("alice", "org_admin"), {"approval": {"approvalId": "apr_1", "org": "acme"}}), "INVALID_INPUT")
}

test_approval_with_empty_requester_denied if {
	denied_only_by(held_by(user("alice", "org_admin"), ""), "INVALID_INPUT")
}

# Without input.approval the same callers are judged as plain calls.
test_absent_approval_denies_nothing_extra if {
	decide(agent).allow == true
	decide(user("bob", "org_member")).allow == true
}

# A held call of another org: denied even when the approver's org holds a grant of the same
# ref (both orgs granted below), so only the org comparison stands between them.
both_orgs_granted := with_grants({"kb:page.read@1": {"demo": {
	"acme": grant({}),
	"beta": grant({"org": "beta"}),
}}})

test_approver_of_another_org_denied if {
	beta_admin := object.union(user("alice", "org_admin"), {"org": "beta"})
	decide_with(held_by(beta_admin, "agent:support-bot"), both_orgs_granted).allow == true
	dec := decide_with(object.union(beta_admin, {"approval": {"requester": "agent:support-bot", "approvalId": "apr_1", "org": "acme"}}), both_orgs_granted)
	dec.allow == false
	codes(dec) == {"APPROVAL_ORG_MISMATCH"}
}

test_approval_of_org_less_approver_denied if {
	dec := decide(object.remove(held_by(user("alice", "org_admin"), "agent:support-bot"), ["org"]))
	dec.allow == false
	"APPROVAL_ORG_MISMATCH" in codes(dec)
}
