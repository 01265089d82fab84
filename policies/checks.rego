package xema.authz

# One rule per check, each with its own reason code.

deny contains {"code": "UNKNOWN_CAPABILITY", "detail": sprintf("%s is not a known capability", [input.ref])} if {
	not cap
}

deny contains {"code": "NOT_ARMED", "detail": sprintf("the caller is not armed for %s", [input.ref])} if {
	not armed
}

armed if {
	some pattern in input.armed
	glob.match(pattern, null, input.ref)
}

deny contains {"code": "CAPABILITY_RETIRED", "detail": detail} if {
	cap.lifecycle == "retired"
	detail := retired_detail
}

retired_detail := sprintf("%s is retired; use %s", [input.ref, cap.replacedBy]) if {
	cap.replacedBy != ""
} else := sprintf("%s is retired and has no successor", [input.ref])

invocable_lifecycle := {"published", "deprecated"}

deny contains {"code": "NOT_PUBLISHED", "detail": sprintf("%s is %s, not published", [input.ref, lifecycle])} if {
	lifecycle := object.get(cap, ["lifecycle"], "")
	lifecycle != "retired"
	not lifecycle in invocable_lifecycle
}

deny contains {"code": "ENVIRONMENT_NOT_ALLOWED", "detail": sprintf("environment %s is not defined (defined: %s)", [input.environment, concat(", ", sort(object.keys(data.xema.environments)))])} if {
	cap
	not env_kind
}

deny contains {"code": "NOT_SAFE_FOR_AGENTS", "detail": sprintf("%s is not safe for agents", [input.ref])} if {
	cap.safeForAgents == false
	input.subject.kind == "agent"
}

deny contains {"code": "CALLER_CONSTRAINT", "detail": sprintf("%s may only be called by a workflow step, not a %s", [input.ref, input.subject.kind])} if {
	cap.callerConstraint == "workflow-step"
	input.subject.kind != "workflow"
}

# A requirement the data names badly (no ownerKind, a roleKey without its fields: the
# manifest schema refuses both) still denies: an undefined detail would drop the reason and
# let the call through without its binding.
deny contains {"code": "MISSING_BINDING", "detail": sprintf("%s needs a %s binding owned by a %s", [input.ref, binding_name(b), object.get(b, "ownerKind", "(owner not named)")])} if {
	some b in cap.requiredBindings
	not bound(b)
}

bound(b) if input.bindings[binding_key(b.roleKey)]

binding_name(b) := name if {
	name := binding_key(b.roleKey)
} else := "(malformed)"

binding_key(k) := sprintf("%s/%s/%s", [k.resourceKind, k.role, k.qualifier]) if {
	is_string(k.qualifier)
	k.qualifier != ""
} else := sprintf("%s/%s", [k.resourceKind, k.role])

deny contains {"code": "INSTANCE_GRADE_NOT_MET", "detail": sprintf("%s is granted per %s instance only in environments of kind %v", [input.ref, cap.instanceGrade.resourceType, cap.instanceGrade.environments])} if {
	is_object(cap.instanceGrade)
	not env_kind in cap.instanceGrade.environments
}

deny contains {"code": "INSTANCE_GRADE_NOT_MET", "detail": sprintf("%s needs the %s relation on the named %s", [input.ref, ig.relation, ig.resourceType])} if {
	ig := cap.instanceGrade
	env_kind in ig.environments
	not input.instanceRelations[sprintf("%s#%s", [ig.resourceType, ig.relation])]
}

deny contains {"code": "AUDIENCE_INCOMPATIBLE", "detail": sprintf("%s output is %s, which environments of kind %s may not receive", [input.ref, classification, env_kind])} if {
	admitted := data.xema.audience[env_kind]
	not admitted[classification]
}

deny contains {"code": "RATE_LIMITED", "detail": sprintf("rate limit for %s exceeded; retry after %v s", [input.ref, object.get(input.usage, ["retryAfterSeconds"], 0)])} if {
	cap
	input.usage.rateExceeded == true
}

deny contains {"code": "QUOTA_EXCEEDED", "detail": sprintf("quota for %s exhausted", [input.ref])} if {
	cap
	input.usage.quotaExceeded == true
}
