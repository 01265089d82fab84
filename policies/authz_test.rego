package xematest.authz

# Tests live outside package xema so that they can swap data.xema.* without recursion.

fixture := {
	"environments": {
		"project": {"kind": "project"},
		"app": {"kind": "app"},
		"org": {"kind": "org"},
		"public-session": {"kind": "public"},
	},
	"audience": {"public": {"public": true}},
	"orgRoleRank": {"org_member": 1, "org_admin": 2, "org_owner": 3},
	"profiles": {"read-only-assistant": {
		"effectClasses": {"read": true},
		"riskTiers": {"low": true, "medium": true},
		"environments": {"project": true, "app": true},
		"rateLimit": {"requests": 60, "per": "1m"},
		"approval": {"effectClasses": {"write": true}, "riskTiers": {"high": true}},
	}},
	"capabilities": {
		"kb:page.read@1": capability({}),
		"kb:page.write@1": capability({"effectClass": "write", "requiresApproval": true}),
		"kb:high.read@1": capability({"riskTier": "high"}),
		"kb:old.read@1": capability({"lifecycle": "retired", "replacedBy": "kb:page.read@1"}),
		"kb:gone.read@1": capability({"lifecycle": "retired"}),
		"kb:legacy.read@1": capability({"lifecycle": "deprecated", "replacedBy": "kb:page.read@1"}),
		"kb:draft.read@1": capability({"lifecycle": "seeded"}),
		"kb:secret.read@1": capability({"safeForAgents": false}),
		"kb:mine.read@1": capability({"reach": "owner"}),
		"kb:public.read@1": capability({"outputClassification": "public"}),
		"kb:unclassified.read@1": capability({"outputClassification": ""}),
		"kb:admin.purge@1": capability({"humanBaseline": {"kind": "explicit-only"}}),
		"kb:page.publish@1": capability({"humanBaseline": {"kind": "org-role", "minimumOrgRole": "org_member", "environments": ["project"]}}),
		"workflow:run.start@1": capability({"callerConstraint": "workflow-step"}),
		"connector:scm.create-pull-request@1": capability({"requiredBindings": [
			{"roleKey": {"resourceKind": "repository", "role": "writer"}, "ownerKind": "project", "remedyCapabilityRef": "connector:scm.bind@1"},
			{"roleKey": {"resourceKind": "channel", "role": "poster", "qualifier": "main"}, "ownerKind": "org"},
		]}),
		"doc:page.share@1": capability({"instanceGrade": {"resourceType": "doc_page", "relation": "editor", "environments": ["project"]}}),
		"biome:install@1": object.union(capability({"humanBaseline": {"kind": "org-administrators", "environments": ["org", "project"]}}), {"biome": {"id": "kernel", "version": "1.0.0"}}),
	},
	"grants": {
		"kb:page.read@1": {"demo": org_grant({})},
		"kb:page.write@1": {"demo": org_grant({})},
		"kb:high.read@1": {"demo": org_grant({})},
		"kb:old.read@1": {"demo": org_grant({})},
		"kb:legacy.read@1": {"demo": org_grant({})},
		"kb:draft.read@1": {"demo": org_grant({})},
		"kb:secret.read@1": {"demo": org_grant({})},
		"kb:mine.read@1": {"demo": org_grant({})},
		"kb:public.read@1": {"demo": org_grant({"environments": {"project": true, "public-session": true}})},
		"kb:unclassified.read@1": {"demo": org_grant({"environments": {"project": true, "public-session": true}})},
		"kb:admin.purge@1": {"demo": org_grant({"subjects": {"user:alice": true}})},
		"workflow:run.start@1": {"demo": org_grant({"environments": {"project": true}})},
		"connector:scm.create-pull-request@1": {"demo": org_grant({})},
		"doc:page.share@1": {"demo": org_grant({})},
		"kb:scoped.read@1": {"other": org_grant({})},
	},
	"revision": "r1",
}

# shallow(base, over) replaces whole keys: object.union would merge nested sets.
shallow(base, over) := object.union(object.remove(base, object.keys(over)), over)

# with_grants(over) replaces the per-biome grant objects of the refs in over.
with_grants(over) := shallow(fixture, {"grants": shallow(fixture.grants, over)})

capability(over) := shallow(
	{
		"biome": {"id": "demo", "version": "1.0.0"},
		"lifecycle": "published", "replacedBy": "",
		"riskTier": "low", "effectClass": "read", "outputClassification": "internal",
		"requiresApproval": false, "safeForAgents": true, "callerConstraint": "",
		"humanBaseline": null, "requiredBindings": [], "instanceGrade": null,
	},
	over,
)

# org_grant(over) is a grant of the fixture's org, filed under it.
org_grant(over) := {"acme": grant(over)}

grant(over) := shallow(
	{
		"grantId": "g_1", "org": "acme", "biomeVersion": "1.0.0", "profile": "read-only-assistant",
		"environments": {"project": true, "app": true},
		"subjects": null,
		"resources": ["kb/pages/*"],
		"audience": {"public": true, "internal": true},
		"requiresApproval": false,
		"rateLimit": {"requests": 60, "per": "1m"},
		"quota": {"requests": 1000, "per": "24h"},
	},
	over,
)

agent := {
	"ref": "kb:page.read@1",
	"subject": {"kind": "agent", "ref": "agent:support-bot"},
	"groups": ["support"], "roles": ["reader"], "orgRole": "org_member",
	"org": "acme", "project": "p1", "session": "s1",
	"environment": "project",
	"resource": "kb/pages/welcome",
	"armed": ["*"],
}

user(name, role) := object.union(agent, {"subject": {"kind": "user", "ref": concat(":", ["user", name])}, "orgRole": role})

decide(inp) := decide_with(inp, fixture)

decide_with(inp, d) := out if {
	out := data.xema.authz.decision with input as inp
		with data.xema.environments as d.environments
		with data.xema.audience as d.audience
		with data.xema.orgRoleRank as d.orgRoleRank
		with data.xema.profiles as d.profiles
		with data.xema.capabilities as d.capabilities
		with data.xema.grants as d.grants
		with data.xema.versions as object.get(d, "versions", {})
		with data.xema.revision as d.revision
}

codes(dec) := {r.code | some r in dec.reasons}

kinds(dec) := {s.kind | some s in dec.suggestions}

denied_only_by(inp, code) if {
	dec := decide(inp)
	dec.allow == false
	codes(dec) == {code}
}

# allow

test_allow if {
	dec := decide(agent)
	dec.allow == true
	dec.reasons == []
	dec.revision == "r1"
}

test_allow_by_group if {
	d := with_grants({"kb:page.read@1": {"demo": org_grant({"subjects": {"group:support": true}})}})
	decide_with(agent, d).allow == true
}

test_allow_by_role if {
	d := with_grants({"kb:page.read@1": {"demo": org_grant({"subjects": {"role:reader": true}})}})
	decide_with(agent, d).allow == true
}

test_allow_without_resource if decide(object.remove(agent, ["resource"])).allow == true

test_allow_named_biome if {
	dec := decide(object.union(agent, {"ref": "kb:scoped.read@1", "biome": "other"}))
	codes(dec) == {"UNKNOWN_CAPABILITY"}
}

test_grant_of_named_biome_applies if {
	d := object.union(fixture, {"capabilities": {"kb:scoped.read@1": capability({})}})
	decide_with(object.union(agent, {"ref": "kb:scoped.read@1", "biome": "other"}), d).allow == true
	codes(decide_with(object.union(agent, {"ref": "kb:scoped.read@1"}), d)) == {"MISSING_GRANT"}
}

test_environments_fall_back_to_profile if {
	d := with_grants({"kb:page.read@1": {"demo": org_grant({"environments": null})}})
	decide_with(object.union(agent, {"environment": "app"}), d).allow == true
	codes(decide_with(object.union(agent, {"environment": "org"}), d)) == {"ENVIRONMENT_NOT_ALLOWED"}
}

test_revision_defaults_empty if {
	dec := data.xema.authz.decision with input as agent
		with data.xema.environments as fixture.environments
		with data.xema.capabilities as fixture.capabilities
		with data.xema.grants as fixture.grants
		with data.xema.profiles as fixture.profiles
	dec.allow == true
	dec.revision == ""
}

# reason codes

test_unknown_capability if denied_only_by(object.union(agent, {"ref": "kb:nope@1"}), "UNKNOWN_CAPABILITY")

test_missing_grant if {
	d := with_grants({"kb:page.read@1": {}})
	dec := decide_with(agent, d)
	codes(dec) == {"MISSING_GRANT"}
	{"kind": "request-grant", "capability": "kb:page.read@1", "environment": "project"} in dec.suggestions
}

test_missing_grant_suggests_audience_compatible_environment if {
	inp := object.union(agent, {"ref": "workflow:run.start@1", "subject": {"kind": "workflow", "ref": "workflow:w"}, "environment": "public-session"})
	d := with_grants({"workflow:run.start@1": {}})
	dec := decide_with(inp, d)
	codes(dec) == {"MISSING_GRANT", "AUDIENCE_INCOMPATIBLE"}
	{"kind": "request-grant", "capability": "workflow:run.start@1", "environment": "app"} in dec.suggestions
}

test_missing_grant_no_compatible_environment if {
	inp := object.union(agent, {"environment": "public-session"})
	d := shallow(with_grants({"kb:page.read@1": {}}), {"environments": {"public-session": {"kind": "public"}}})
	dec := decide_with(inp, d)
	"MISSING_GRANT" in codes(dec)
	not "request-grant" in kinds(dec)
}

test_resource_not_reachable if {
	dec := decide(object.union(agent, {"resource": "kb/secrets/keys"}))
	codes(dec) == {"RESOURCE_NOT_REACHABLE"}
}

test_resource_glob_single_segment if denied_only_by(object.union(agent, {"resource": "kb/pages/a/b"}), "RESOURCE_NOT_REACHABLE")

# A capability declaring its resource property (x-xema-resource): a grant restricting resources
# binds the call whether or not it names the resource; leaving it out is denied.
declared_resource := shallow(fixture, {"capabilities": object.union(fixture.capabilities, {"kb:page.read@1": capability({"resource": "pageId"})})})

test_resource_left_out_under_restricting_grant_denied if {
	dec := decide_with(object.remove(agent, ["resource"]), declared_resource)
	dec.allow == false
	codes(dec) == {"RESOURCE_NOT_REACHABLE"}
	some r in dec.reasons
	contains(r.detail, "naming no pageId")
}

test_resource_named_under_restricting_grant_allowed if {
	decide_with(agent, declared_resource).allow == true
	denied_only_by(object.union(agent, {"resource": "kb/secrets/keys"}), "RESOURCE_NOT_REACHABLE")
}

test_resource_left_out_without_restriction_allowed if {
	unrestricted := shallow(declared_resource, {"grants": shallow(declared_resource.grants, {"kb:page.read@1": {"demo": org_grant({"resources": null})}})})
	decide_with(object.remove(agent, ["resource"]), unrestricted).allow == true
}

# A capability that declares no resource property is not bound by the grant's resources.
test_undeclared_resource_left_out_allowed if decide(object.remove(agent, ["resource"])).allow == true

test_resource_owner if {
	mine := object.union(agent, {"ref": "kb:mine.read@1", "resourceOwner": "agent:support-bot"})
	decide(mine).allow == true
	denied_only_by(object.union(mine, {"resourceOwner": "agent:other"}), "RESOURCE_NOT_REACHABLE")
	denied_only_by(object.remove(mine, ["resourceOwner"]), "RESOURCE_NOT_REACHABLE")
}

test_environment_not_allowed if {
	dec := decide(object.union(agent, {"environment": "org"}))
	codes(dec) == {"ENVIRONMENT_NOT_ALLOWED"}
	{"kind": "switch-environment", "from": "org", "to": "app"} in dec.suggestions
	{"kind": "request-grant", "capability": "kb:page.read@1", "environment": "org"} in dec.suggestions
}

test_environment_not_allowed_audience_limits_suggestions if {
	dec := decide(object.union(agent, {"ref": "workflow:run.start@1", "subject": {"kind": "workflow", "ref": "workflow:w"}, "environment": "public-session"}))
	codes(dec) == {"ENVIRONMENT_NOT_ALLOWED", "AUDIENCE_INCOMPATIBLE"}
	{"kind": "switch-environment", "from": "public-session", "to": "project"} in dec.suggestions
	not "request-grant" in kinds(dec)
}

test_environment_undefined if {
	dec := decide(object.union(agent, {"environment": "mars"}))
	codes(dec) == {"ENVIRONMENT_NOT_ALLOWED"}
	startswith(dec.reasons[0].detail, "environment mars is not defined (defined: ")
	contains(dec.reasons[0].detail, "project")
}

test_subject_not_covered if {
	d := with_grants({"kb:page.read@1": {"demo": org_grant({"subjects": {"agent:other": true, "group:ops": true, "role:admin": true}})}})
	dec := decide_with(agent, d)
	codes(dec) == {"SUBJECT_NOT_COVERED"}
	# The grant exists: the request names the caller it must also cover.
	dec.suggestions == [{"kind": "request-grant", "capability": "kb:page.read@1", "environment": agent.environment, "subject": agent.subject.ref}]
}

test_audience_incompatible_environment if {
	inp := object.union(agent, {"ref": "kb:unclassified.read@1", "environment": "public-session"})
	codes(decide(inp)) == {"AUDIENCE_INCOMPATIBLE"}
	decide(object.union(inp, {"ref": "kb:public.read@1"})).allow == true
}

test_audience_incompatible_grant if {
	d := with_grants({"kb:page.read@1": {"demo": org_grant({"audience": {"public": true}})}})
	codes(decide_with(agent, d)) == {"AUDIENCE_INCOMPATIBLE"}
}

test_rate_limited if denied_only_by(object.union(agent, {"usage": {"rateExceeded": true, "retryAfterSeconds": 3}}), "RATE_LIMITED")

test_quota_exceeded if denied_only_by(object.union(agent, {"usage": {"quotaExceeded": true}}), "QUOTA_EXCEEDED")

test_not_safe_for_agents if {
	inp := object.union(agent, {"ref": "kb:secret.read@1"})
	denied_only_by(inp, "NOT_SAFE_FOR_AGENTS")
	decide(object.union(user("bob", "org_member"), {"ref": "kb:secret.read@1"})).allow == true
}

test_caller_constraint if {
	inp := object.union(agent, {"ref": "workflow:run.start@1"})
	denied_only_by(inp, "CALLER_CONSTRAINT")
	decide(object.union(inp, {"subject": {"kind": "workflow", "ref": "workflow:deploy"}})).allow == true
}

test_missing_binding if {
	inp := object.union(agent, {"ref": "connector:scm.create-pull-request@1", "bindings": {"channel/poster/main": true}})
	dec := decide(inp)
	codes(dec) == {"MISSING_BINDING"}
	dec.suggestions == [{"kind": "establish-binding", "capability": "connector:scm.bind@1", "binding": "repository/writer"}]
	decide(object.union(inp, {"bindings": {"repository/writer": true}})).allow == true
}

# Requirements named badly still deny (an undefined detail would drop the reason).
test_missing_binding_malformed_requirement if {
	inp := object.union(agent, {"ref": "connector:scm.create-pull-request@1", "bindings": {"repository/writer": true, "channel/poster/main": true}})
	decide(inp).allow == true
	every bad in [
		{"roleKey": {"resourceKind": "repository", "role": "admin"}},
		{"roleKey": {"role": "admin"}, "ownerKind": "org"},
		{"ownerKind": "org"},
	] {
		caps := json.patch(fixture.capabilities, [{"op": "add", "path": "/connector:scm.create-pull-request@1/requiredBindings/-", "value": bad}])
		dec := decide_with(inp, object.union(fixture, {"capabilities": caps}))
		codes(dec) == {"MISSING_BINDING"}
		dec.allow == false
	}
}

test_missing_binding_qualified_without_remedy if {
	inp := object.union(agent, {"ref": "connector:scm.create-pull-request@1", "bindings": {"repository/writer": true}})
	dec := decide(inp)
	codes(dec) == {"MISSING_BINDING"}
	dec.suggestions == []
}

test_instance_grade if {
	inp := object.union(agent, {"ref": "doc:page.share@1"})
	denied_only_by(inp, "INSTANCE_GRADE_NOT_MET")
	decide(object.union(inp, {"instanceRelations": {"doc_page#editor": true}})).allow == true
	denied_only_by(object.union(inp, {"instanceRelations": {"doc_page#editor": true}, "environment": "app"}), "INSTANCE_GRADE_NOT_MET")
}

test_capability_retired if {
	dec := decide(object.union(agent, {"ref": "kb:old.read@1"}))
	codes(dec) == {"CAPABILITY_RETIRED"}
	dec.reasons[0].detail == "kb:old.read@1 is retired; use kb:page.read@1"
	dec.suggestions == [{"kind": "use-successor", "capability": "kb:page.read@1"}]
}

test_capability_retired_without_successor if {
	d := with_grants({"kb:gone.read@1": {"demo": org_grant({})}})
	dec := decide_with(object.union(agent, {"ref": "kb:gone.read@1"}), d)
	dec.reasons == [{"code": "CAPABILITY_RETIRED", "detail": "kb:gone.read@1 is retired and has no successor"}]
	dec.suggestions == []
}

test_deprecated_allowed_with_successor if {
	dec := decide(object.union(agent, {"ref": "kb:legacy.read@1"}))
	dec.allow == true
	dec.suggestions == [{"kind": "use-successor", "capability": "kb:page.read@1"}]
}

test_not_published if denied_only_by(object.union(agent, {"ref": "kb:draft.read@1"}), "NOT_PUBLISHED")

test_not_armed if {
	denied_only_by(object.union(agent, {"armed": ["connector:*", "kb:page.write@1"]}), "NOT_ARMED")
	decide(object.union(agent, {"armed": ["kb:*"]})).allow == true
	codes(decide(object.remove(agent, ["armed"]))) == {"INVALID_INPUT", "NOT_ARMED"}
}

# humanBaseline

test_org_administrators_hold_kernel_capability_without_grant if {
	inp := object.union(user("root", "org_admin"), {"ref": "biome:install@1", "environment": "org"})
	dec := decide(inp)
	dec.allow == true
	dec.obligations == []
	decide(object.union(inp, {"orgRole": "org_owner"})).allow == true
}

test_human_baseline_not_met_member if {
	dec := decide(object.union(user("bob", "org_member"), {"ref": "biome:install@1", "environment": "org"}))
	codes(dec) == {"HUMAN_BASELINE_NOT_MET", "MISSING_GRANT"}
}

test_human_baseline_not_met_environment if {
	dec := decide(object.union(user("root", "org_admin"), {"ref": "biome:install@1", "environment": "app"}))
	codes(dec) == {"HUMAN_BASELINE_NOT_MET", "MISSING_GRANT"}
}

test_human_baseline_agent_needs_grant if {
	codes(decide(object.union(agent, {"ref": "biome:install@1", "environment": "org"}))) == {"MISSING_GRANT"}
}

# The built-in biome's capabilities are never granted: no denial suggests asking for a grant.
test_builtin_capability_suggests_no_grant if {
	builtin := object.union(fixture, {"capabilities": object.union(fixture.capabilities, {"biome:install@1": object.union(
		fixture.capabilities["biome:install@1"],
		{"biome": {"id": "xema", "version": "0.0.0"}},
	)})})
	member := decide_with(object.union(user("bob", "org_member"), {"ref": "biome:install@1", "environment": "org"}), builtin)
	"MISSING_GRANT" in codes(member)
	not "request-grant" in kinds(member)
	bot := decide_with(object.union(agent, {"ref": "biome:install@1", "environment": "org"}), builtin)
	not "request-grant" in kinds(bot)
	some r in bot.reasons
	r.code == "MISSING_GRANT"
	r.detail == "biome:install@1 is the gateway's own (biome xema): never granted, held only by people of an org role"
	# Another biome's capability still gets the suggestion.
	"request-grant" in kinds(decide(object.union(agent, {"ref": "biome:install@1", "environment": "org"})))
}

# No grant makes a capability that is not safe for agents callable by one.
test_unsafe_for_agents_suggests_no_grant if {
	unsafe := object.union(fixture, {"capabilities": object.union(fixture.capabilities, {"kb:page.read@1": object.union(
		fixture.capabilities["kb:page.read@1"],
		{"safeForAgents": false},
	)}), "grants": {}})
	dec := decide_with(agent, unsafe)
	"NOT_SAFE_FOR_AGENTS" in codes(dec)
	not "request-grant" in kinds(dec)
}

test_org_role_baseline if {
	inp := object.union(user("bob", "org_member"), {"ref": "kb:page.publish@1"})
	decide(inp).allow == true
	codes(decide(object.union(inp, {"orgRole": ""}))) == {"HUMAN_BASELINE_NOT_MET", "MISSING_GRANT"}
}

test_explicit_only if {
	inp := object.union(user("alice", "org_owner"), {"ref": "kb:admin.purge@1"})
	decide(inp).allow == true
	dec := decide(object.union(user("bob", "org_owner"), {"ref": "kb:admin.purge@1"}))
	codes(dec) == {"HUMAN_BASELINE_NOT_MET", "SUBJECT_NOT_COVERED"}
}

test_explicit_only_open_grant_is_not_explicit if {
	d := with_grants({"kb:admin.purge@1": {"demo": org_grant({})}})
	codes(decide_with(object.union(user("bob", "org_owner"), {"ref": "kb:admin.purge@1"}), d)) == {"HUMAN_BASELINE_NOT_MET"}
}

# obligations

test_obligations_rate_limit_and_quota if {
	dec := decide(agent)
	dec.obligations == [
		{"kind": "quota", "requests": 1000, "per": "24h"},
		{"kind": "rate-limit", "requests": 60, "per": "1m"},
	]
}

test_rate_limit_falls_back_to_profile if {
	d := with_grants({"kb:page.read@1": {"demo": org_grant({"rateLimit": null, "quota": null})}})
	decide_with(agent, d).obligations == [{"kind": "rate-limit", "requests": 60, "per": "1m"}]
}

test_approval_from_capability if {
	dec := decide(object.union(agent, {"ref": "kb:page.write@1"}))
	dec.allow == true
	{"kind": "approval"} in dec.obligations
	dec.suggestions == [{"kind": "request-approval", "capability": "kb:page.write@1"}]
}

test_approval_from_grant if {
	d := with_grants({"kb:page.read@1": {"demo": org_grant({"requiresApproval": true})}})
	{"kind": "approval"} in decide_with(agent, d).obligations
	not {"kind": "approval"} in decide(agent).obligations
}

# The compiler folds the profile's approval rules into grant.requiresApproval, so a grant
# customized to false lifts them.
test_grant_lifts_profile_approval if {
	d := with_grants({"kb:high.read@1": {"demo": org_grant({"requiresApproval": false})}})
	dec := decide_with(object.union(agent, {"ref": "kb:high.read@1"}), d)
	dec.allow == true
	not {"kind": "approval"} in dec.obligations
}

# platform deny rules

test_custom_deny_joins_decision if {
	dec := decide(agent) with data.xema.custom.deny as {{"code": "OFF_HOURS", "detail": "closed"}}
	dec.allow == false
	dec.reasons == [{"code": "OFF_HOURS", "detail": "closed"}]
}

test_custom_deny_without_detail if {
	dec := decide(agent) with data.xema.custom.deny as {{"code": "NOPE"}}
	dec.reasons == [{"code": "NOPE", "detail": ""}]
}

test_custom_deny_malformed_still_denies if {
	dec := decide(agent) with data.xema.custom.deny as {"plain string", {"code": 7}}
	dec.allow == false
	codes(dec) == {"CUSTOM_DENY"}
	count(dec.reasons) == 2
}

# malformed input never allows

test_empty_input_denied if {
	dec := decide({})
	dec.allow == false
	codes(dec) == {"INVALID_INPUT"}
	count(dec.reasons) == 6
}

test_missing_subject_ref_denied if {
	dec := decide(object.union(agent, {"subject": {"kind": "agent", "ref": ""}}))
	dec.allow == false
	dec.reasons == [{"code": "INVALID_INPUT", "detail": "input.subject.ref must be a non-empty string"}]
}

test_armed_not_array_denied if {
	dec := decide(object.union(agent, {"armed": "*"}))
	codes(dec) == {"INVALID_INPUT", "NOT_ARMED"}
}

# orgs are tenants
test_grant_of_another_org_does_not_admit if {
	denied_only_by(object.union(agent, {"org": "beta"}), "MISSING_GRANT")
}

test_missing_org_is_invalid if {
	dec := decide(object.remove(agent, ["org"]))
	dec.allow == false
	"INVALID_INPUT" in codes(dec)
}

test_grant_naming_another_org_denies if {
	d := with_grants({"kb:page.read@1": {"demo": {"acme": grant({"org": "beta"})}}})
	dec := decide_with(agent, d)
	dec.allow == false
	codes(dec) == {"GRANT_ORG_MISMATCH"}
}

# a grant pins the version it approved
pinned_fixture := shallow(
	with_grants({"kb:page.read@1": {"demo": {
		"acme": grant({}),
		"beta": grant({"org": "beta", "biomeVersion": "1.0.1"}),
	}}}),
	{"versions": {"kb:page.read@1": {"1.0.1": object.union(
		capability({"requiresApproval": true, "riskTier": "high"}),
		{"biome": {"id": "demo", "version": "1.0.1"}},
	)}}},
)

test_pinned_version_decides_for_its_org if {
	dec := decide_with(object.union(agent, {"org": "beta"}), pinned_fixture)
	dec.allow == true
	{o.kind | some o in dec.obligations} == {"approval", "rate-limit", "quota"}
}

test_other_org_keeps_its_approved_version if {
	dec := decide_with(agent, pinned_fixture)
	dec.allow == true
	not "approval" in {o.kind | some o in dec.obligations}
}

# A grant that names no environments (null or no key at all) takes its profile's.
test_grant_without_environments_takes_the_profiles if {
	every g in [
		json.remove(grant({}), ["environments"]),
		object.union(grant({}), {"environments": null}),
	] {
		d := object.union(fixture, {"grants": object.union(fixture.grants, {"kb:page.read@1": {"demo": {"acme": g}}})})
		decide_with(agent, d).allow == true
		codes(decide_with(object.union(agent, {"environment": "org"}), d)) == {"ENVIRONMENT_NOT_ALLOWED"}
	}
}
