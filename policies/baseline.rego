package xema.authz

# humanBaseline: how a human (subject kind user) may hold a capability.

baseline := cap.humanBaseline

baseline_role_kinds := {"org-role", "org-administrators"}

minimum_org_role := baseline.minimumOrgRole if baseline.kind == "org-role"

minimum_org_role := "org_admin" if baseline.kind == "org-administrators"

human_baseline_met if {
	input.subject.kind == "user"
	baseline.kind in baseline_role_kinds
	env_kind in baseline.environments
	org_role_rank[input.orgRole] >= org_role_rank[minimum_org_role]
}

# A role baseline not met leaves the human on the grant path; with no grant, say why.
deny contains {"code": "HUMAN_BASELINE_NOT_MET", "detail": sprintf("%s needs org role %s or higher in environments of kind %v", [input.ref, minimum_org_role, baseline.environments])} if {
	input.subject.kind == "user"
	baseline.kind in baseline_role_kinds
	not human_baseline_met
	not grant
}

# explicit-only: a human needs a grant that names them, a group or a role of theirs.
deny contains {"code": "HUMAN_BASELINE_NOT_MET", "detail": sprintf("%s is explicit-only: the grant must name %s, a group or a role", [input.ref, input.subject.ref])} if {
	input.subject.kind == "user"
	baseline.kind == "explicit-only"
	not explicitly_covered
}
