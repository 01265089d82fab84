# The rule's own tests: the rule alone (with the data it reads), then the whole decision of
# the built-in policy with the rule beside it. Outside package xema, so that a test may swap
# data.xema (`with data.xema as ...`) without making the decision depend on itself.
package platform.no_agent_writes_in_public_test

import data.xema.authz
import data.xema.custom

environments := {"public-session": {"kind": "public"}, "project": {"kind": "project"}}

capabilities := {
	"workflow:run.start@1": {"effectClass": "write"},
	"kb:page.read@1": {"effectClass": "read"},
}

call(subject_kind, ref, environment) := {
	"ref": ref, "environment": environment, "org": "acme", "armed": ["*"],
	"subject": {"kind": subject_kind, "ref": sprintf("%s:x", [subject_kind])},
}

test_agent_write_in_public_denied if {
	reasons := custom.deny with input as call("agent", "workflow:run.start@1", "public-session")
		with data.xema.environments as environments
		with data.xema.capabilities as capabilities
	reasons == {{
		"code": "NO_AGENT_WRITES_IN_PUBLIC",
		"detail": "workflow:run.start@1 is a write capability; agents may not call it in environment public-session (kind public)",
	}}
}

test_agent_read_in_public_not_denied if {
	count(custom.deny) == 0 with input as call("agent", "kb:page.read@1", "public-session")
		with data.xema.environments as environments
		with data.xema.capabilities as capabilities
}

test_agent_write_in_project_not_denied if {
	count(custom.deny) == 0 with input as call("agent", "workflow:run.start@1", "project")
		with data.xema.environments as environments
		with data.xema.capabilities as capabilities
}

test_person_write_in_public_not_denied if {
	count(custom.deny) == 0 with input as call("user", "workflow:run.start@1", "public-session")
		with data.xema.environments as environments
		with data.xema.capabilities as capabilities
}

# Beside the built-in policy, the rule's denial is one of the decision's reasons, and it
# denies a call the grants alone would allow.
test_decision_carries_the_rule if {
	decision := decide(call("agent", "workflow:run.start@1", "public-session"))
	not decision.allow
	{r.code | some r in decision.reasons} == {"NO_AGENT_WRITES_IN_PUBLIC"}
}

test_decision_allows_the_read if {
	decide(call("agent", "kb:page.read@1", "public-session")).allow
}

# decide is the built-in decision over the data below, each part of data.xema the grant
# tables fill swapped in (data.xema also holds the policy's own rules, which stay).
decide(inp) := decision if {
	decision := authz.decision with input as inp
		with data.xema.environments as granted.environments
		with data.xema.audience as granted.audience
		with data.xema.orgRoleRank as granted.orgRoleRank
		with data.xema.profiles as granted.profiles
		with data.xema.capabilities as granted.capabilities
		with data.xema.grants as granted.grants
		with data.xema.versions as {}
		with data.xema.revision as granted.revision
}

# granted is data.xema with one grant of org acme covering both capabilities in
# public-session (the support-chatbot profile admits writes there): what the gateway compiles
# from its grant tables (docs/policy-data.md), cut to what the decision reads.
granted := {
	"environments": environments,
	"audience": {"public": {"public": true}},
	"orgRoleRank": {"org_member": 1, "org_admin": 2, "org_owner": 3},
	"profiles": {"support-chatbot": {
		"effectClasses": {"read": true, "write": true}, "riskTiers": {"low": true},
		"environments": {"public-session": true},
		"approval": {"effectClasses": {}, "riskTiers": {}},
	}},
	"capabilities": {ref: descriptor(effect) | some ref, c in capabilities; effect := c.effectClass},
	"grants": {ref: {"demo": {"acme": grant}} | some ref, _ in capabilities},
	"revision": "r1",
}

descriptor(effect) := {
	"biome": {"id": "demo", "version": "1.0.0"},
	"lifecycle": "published", "replacedBy": "",
	"riskTier": "low", "effectClass": effect, "outputClassification": "public",
	"requiresApproval": false, "safeForAgents": true, "callerConstraint": "",
	"humanBaseline": null, "requiredBindings": [], "instanceGrade": null,
}

grant := {
	"grantId": "g_1", "org": "acme", "biomeVersion": "1.0.0", "profile": "support-chatbot",
	"environments": {"public-session": true}, "subjects": null, "resources": null,
	"audience": {"public": true}, "requiresApproval": false,
}
