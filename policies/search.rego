package xema.authz

# Search's first cut: the refs a caller (the input without ref and resource) could be
# admitted to, computed once per caller and revision, so a search decides only those. It is
# a superset of {ref | allow}: a call is allowed only through a grant of the caller's org
# that covers the caller (grant.rego) or a human baseline (baseline.rego); every other ref
# would be denied, and search skips it without a decision. internal/policy's
# TestSearchableIsSound checks allow => ref in searchable over the decision corpus.
searchable contains ref if {
	some ref, by_biome in data.xema.grants
	some by_org in by_biome
	covers_caller(by_org[input.org])
}

searchable contains ref if {
	input.subject.kind == "user"
	some ref, c in data.xema.capabilities
	c.humanBaseline.kind in baseline_role_kinds
}

searchable contains ref if {
	input.subject.kind == "user"
	some ref, by_version in data.xema.versions
	some c in by_version
	c.humanBaseline.kind in baseline_role_kinds
}

# The subject coverage of grant.rego, for a grant g instead of the call's own.
covers_caller(g) if g.subjects == null

covers_caller(g) if g.subjects[input.subject.ref]

covers_caller(g) if {
	some x in input.groups
	g.subjects[concat(":", ["group", x])]
}

covers_caller(g) if {
	some r in input.roles
	g.subjects[concat(":", ["role", r])]
}
