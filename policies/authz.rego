# The runtime decision of the permission model (stage 2). The contract for input and
# data.xema is docs/policy-data.md. Every lookup below is an object-key lookup: nothing
# iterates over all grants, so decision time does not grow with their number.
package xema.authz

# The one query the gateway prepares. A clean call (fast.rego) is decided by
# clean_decision, which follows from the capability, its grant and the data alone: the
# engine partially evaluates both, and full_decision, per (ref, org, biome) and per call
# evaluates clean's residual, then full_decision's when it does not hold
# (internal/policy/fast.go).
decision := clean_decision if {
	clean
} else := full_decision

# The decision of a call that is not clean (the engine evaluates it, or its residual for the
# key, directly when clean's residual does not hold, so clean is not evaluated twice). Sets
# are sorted rather than collected by comprehensions, which partial evaluation would keep
# whole, with every rule they read.
full_decision := {
	"allow": allow,
	"reasons": reasons,
	"suggestions": sort(suggestion),
	"obligations": sort(obligation),
	"revision": revision,
}

# What decision is for a clean call: no reason and no suggestion that follows from one.
clean_decision := {
	"allow": true,
	"reasons": [],
	"suggestions": sort(standing_suggestion),
	"obligations": sort(obligation),
	"revision": revision,
}

# A clean call (fast.rego) has none; its decision evaluates no deny rule at all.
reasons := sort(deny)

# A rule whose body is undefined denies nothing, so allow also needs the call to be
# well-formed and to name a known capability in a known environment: fail closed.
default allow := false

allow if {
	count(reasons) == 0
	cap
	env_kind
}

required_strings := [["ref"], ["environment"], ["org"], ["subject", "kind"], ["subject", "ref"]]

deny contains {"code": "INVALID_INPUT", "detail": sprintf("input.%s must be a non-empty string", [concat(".", path)])} if {
	some path in required_strings
	not non_empty_string(object.get(input, path, null))
}

deny contains {"code": "INVALID_INPUT", "detail": "input.armed must be an array of globs"} if {
	not is_array(object.get(input, "armed", null))
}

non_empty_string(x) if {
	is_string(x)
	x != ""
}

# Platform teams' own Rego (package xema.custom) joins through its `deny` set. A malformed
# entry still denies: it is reported, never dropped.
deny contains reason if {
	some r in data.xema.custom.deny
	reason := custom_reason(r)
}

custom_reason(r) := {"code": r.code, "detail": object.get(r, "detail", "")} if {
	is_object(r)
	is_string(r.code)
}

custom_reason(r) := {"code": "CUSTOM_DENY", "detail": sprintf("malformed custom deny entry: %v", [r])} if {
	not is_object(r)
}

custom_reason(r) := {"code": "CUSTOM_DENY", "detail": sprintf("malformed custom deny entry: %v", [r])} if {
	is_object(r)
	not is_string(r.code)
}

# The capability as the caller's grant approved it: a grant pins the biome version whose
# descriptor (risk tier, approval rule, ...) decides its calls, whatever was submitted since.
# Without a grant, the catalog's own version.
cap := pinned if {
	pinned := data.xema.versions[input.ref][grant.biomeVersion]
} else := catalog_cap

catalog_cap := data.xema.capabilities[input.ref]

# The biome whose install grant applies: the one the call runs for, else the declaring biome.
grant_biome := input.biome if {
	is_string(input.biome)
	input.biome != ""
} else := catalog_cap.biome.id

# Grants are kept per org: only a grant of the caller's own org can apply.
grant := data.xema.grants[input.ref][grant_biome][input.org]

env_kind := data.xema.environments[input.environment].kind

default revision := ""

revision := data.xema.revision

# Unclassified output is treated as internal: never as public.
default classification := "internal"

classification := cap.outputClassification if {
	is_string(cap.outputClassification)
	cap.outputClassification != ""
}

default org_role_rank := {"org_member": 1, "org_admin": 2, "org_owner": 3}

org_role_rank := data.xema.orgRoleRank

profile := data.xema.profiles[grant.profile]
