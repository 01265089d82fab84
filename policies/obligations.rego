package xema.authz

# Obligations the gateway must honour when it runs an allowed call. They are present on
# denials too, so the gateway knows the limits it counts against.

obligation contains {"kind": "approval"} if approval_required

approval_required if cap.requiresApproval == true

# The grant compiler folds the profile's approval rules and the admin's customization into
# grant.requiresApproval, so a customization can lift a profile's rule (never the
# capability's own flag, above).
approval_required if grant.requiresApproval == true

obligation contains object.union({"kind": "rate-limit"}, limit) if {
	limit := effective_rate_limit
}

effective_rate_limit := grant.rateLimit if {
	is_object(grant.rateLimit)
} else := profile.rateLimit if {
	is_object(profile.rateLimit)
}

obligation contains object.union({"kind": "quota"}, grant.quota) if {
	is_object(grant.quota)
}
