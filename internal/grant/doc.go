// Package grant holds stage 1 of the permission model (install time): the built-in
// permission profiles, named environments, the PermissionDigest an org admin approves,
// validation of grant requests, and the compiler that turns the stored catalog and grants
// into the data.xema document the Rego in policies/ decides over (docs/policy-data.md).
//
// Everything here is pure logic over store and manifest records: no I/O of its own.
package grant
