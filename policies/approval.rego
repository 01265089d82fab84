package xema.authz

# Deciding a held call (input.approval present): the same decision, asked for the approver
# on the held capability, plus who may never decide it. Absent, these rules deny nothing.

approval_present if "approval" in object.keys(input)

deny contains {"code": "INVALID_INPUT", "detail": "input.approval.requester must be a non-empty string"} if {
	approval_present
	not non_empty_string(object.get(input, ["approval", "requester"], null))
}

# A held call is decided within its own org only. The approval service compares the orgs
# before asking; this rule holds if that check is ever lost (both orgs may hold the ref).
deny contains {"code": "APPROVAL_ORG_MISMATCH", "detail": sprintf("approval %s is not of org %v", [approval_id, object.get(input, "org", null)])} if {
	approval_present
	held_org := object.get(input, ["approval", "org"], "")
	held_org != ""
	held_org != object.get(input, "org", null)
}

# The requester can never approve or reject its own call.
deny contains {"code": "OWN_APPROVAL", "detail": sprintf("%s requested call %s and may not decide its own approval", [input.subject.ref, approval_id])} if {
	approval_present
	input.subject.ref == input.approval.requester
}

# Only people decide held calls.
deny contains {"code": "APPROVER_NOT_HUMAN", "detail": sprintf("%s is a %s; only people (subject kind user) may decide approval %s", [input.subject.ref, input.subject.kind, approval_id])} if {
	approval_present
	input.subject.kind != "user"
}

approval_id := object.get(input, ["approval", "approvalId"], "")
