package xema.authz

# Suggestions computed from the data, so an agent can self-correct.

# Whether a deny rule gave code: a test on deny itself, not a set of the codes made for it.
denied(code) if {
	some r in deny
	r.code == code
}

suggestion contains s if some s in standing_suggestion

# The suggestions that follow from the capability and its grant, allowed or not.
standing_suggestion contains {"kind": "use-successor", "capability": cap.replacedBy} if {
	cap.lifecycle in {"retired", "deprecated"}
	is_string(cap.replacedBy)
	cap.replacedBy != ""
}

standing_suggestion contains {"kind": "request-approval", "capability": input.ref} if approval_required

# No grant: name the environment where a grant would make this call pass. (These follow
# from a reason, so a clean call, decided by clean_decision, never has them.)
suggestion contains {"kind": "request-grant", "capability": input.ref, "environment": env} if {
	denied("MISSING_GRANT")
	grant_could_lift
	env := grantable_environment
}

# Granted, but not here: extend the grant to this environment, or move to one it admits.
suggestion contains {"kind": "request-grant", "capability": input.ref, "environment": input.environment} if {
	denied("ENVIRONMENT_NOT_ALLOWED")
	grant_could_lift
	audience_admits(env_kind)
}

# Granted, but not to this caller: the grant must also name it (or a group or role it has).
suggestion contains {"kind": "request-grant", "capability": input.ref, "environment": input.environment, "subject": input.subject.ref} if {
	denied("SUBJECT_NOT_COVERED")
	grant_could_lift
}

# A grant is worth asking for only if one can exist and lift the denial: the built-in biome's
# capabilities are held by role (humanBaseline), never granted, and no grant makes a
# capability unsafe for agents callable by one.
grant_could_lift if {
	cap.biome.id != builtin_biome
	not denied("NOT_SAFE_FOR_AGENTS")
}

# The biome of the gateway's own capabilities (internal/app.KernelBiome).
builtin_biome := "xema"

suggestion contains {"kind": "switch-environment", "from": input.environment, "to": to} if {
	denied("ENVIRONMENT_NOT_ALLOWED")
	candidates := [name |
		some name, on in grant_environments
		on == true
		audience_admits(data.xema.environments[name].kind)
	]
	count(candidates) > 0
	to := min(candidates)
}

suggestion contains {"kind": "establish-binding", "capability": b.remedyCapabilityRef, "binding": key} if {
	some b in cap.requiredBindings
	key := binding_key(b.roleKey)
	not input.bindings[key]
	is_string(b.remedyCapabilityRef)
	b.remedyCapabilityRef != ""
}

# The current environment if a grant here would do; otherwise the first (by name) whose
# kind may receive the capability's output. Environments are few: this is not a grant scan.
# Exclusive rules, not an else, for partial evaluation (as grant_environments), negated
# through a rule so an undefined environment kind takes the second, as the else did.
grantable_environment := input.environment if here_admits_output

grantable_environment := min(names) if {
	not here_admits_output
	names := [name |
		some name, e in data.xema.environments
		audience_admits(e.kind)
	]
	count(names) > 0
}

here_admits_output if audience_admits(env_kind)

audience_admits(kind) if not data.xema.audience[kind]

audience_admits(kind) if data.xema.audience[kind][classification]
