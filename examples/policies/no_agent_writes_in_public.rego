# A platform rule beside the grants: whatever a grant or profile allows, an agent may not call
# a capability that changes anything in an environment of kind public (a public chat session,
# a website widget). Reads stay as the grants say.
#
# Serve it with `xema serve --policy-dir examples/policies`; test it with
# `xema policy test examples/policies` or stock `opa test policies/ examples/policies/`
# (docs/platform-policy.md).
package xema.custom

deny contains {"code": "NO_AGENT_WRITES_IN_PUBLIC", "detail": detail} if {
	input.subject.kind == "agent"
	data.xema.environments[input.environment].kind == "public"
	effect := data.xema.capabilities[input.ref].effectClass
	effect != "read"
	detail := sprintf("%s is a %s capability; agents may not call it in environment %s (kind public)", [input.ref, effect, input.environment])
}
