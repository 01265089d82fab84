package xema.authz

# Search's first cut: the refs a caller (the input without ref and resource) could be
# admitted to, computed once per caller and revision, so a search decides only those. It is
# a superset of {ref | allow}: a call is allowed only through a grant of the caller's org
# whose subjects cover the caller (grant.rego) or through a human baseline (baseline.rego);
# every other ref would be denied, and search skips it without a decision.
# internal/policy's TestSearchableIsSound checks allow => ref in searchable over the
# decision corpus. It reads the index of data.xema.grantedTo and data.xema.baselined
# (grant.Index), so it costs what it returns, not the number of grants.
# search_cut is searchable when data.xema carries the index, else undefined: a search then
# decides every ref instead of showing nothing.
search_cut := searchable if is_object(data.xema.grantedTo)

searchable contains ref if {
	some key in caller_keys
	some ref in data.xema.grantedTo[input.org][key]
}

searchable contains ref if {
	input.subject.kind == "user"
	some ref in data.xema.baselined
}

# The subjects keys a grant covering the caller names (subject_covered of grant.rego);
# "*" stands for subjects null.
caller_keys contains "*"

caller_keys contains input.subject.ref

caller_keys contains concat(":", ["group", g]) if some g in input.groups

caller_keys contains concat(":", ["role", r]) if some r in input.roles
