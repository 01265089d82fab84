// Package identity verifies bearer tokens and turns their claims into the Execution Context
// of a call. It also runs the development issuer used when no external issuer is configured.
package identity

import "context"

// Subject is who calls: kind is one of user, agent, workflow, service; Ref is "kind:name".
type Subject struct {
	Kind string `json:"kind"`
	Ref  string `json:"ref"`
}

// DefaultOrg is the org of a caller whose token names none: the single org of a development
// deployment. Verification sets it, so an ExecContext's Org is never empty.
const DefaultOrg = "default"

// ExecContext is the verified Execution Context of one call. It comes only from verified
// token claims: no header can change it.
type ExecContext struct {
	Subject     Subject  `json:"subject"`
	Groups      []string `json:"groups"`
	Roles       []string `json:"roles"`
	OrgRole     string   `json:"orgRole,omitempty"` // org_owner | org_admin | org_member
	Org         string   `json:"org"`
	Project     string   `json:"project,omitempty"`
	Environment string   `json:"environment"`
	Session     string   `json:"session,omitempty"`
	// Armed holds ref globs the caller is armed for. A token without an armed claim is
	// armed for all and verification sets ["*"], so Armed is never empty.
	Armed []string `json:"armed"`
	// Delegation is set when the caller acts for a person (the token's act claim): Subject
	// is then the actor, whose grant covers the call, and the person's org role, groups and
	// roles are the delegation's, never the actor's.
	Delegation *Delegation `json:"delegation,omitempty"`
}

// Delegation is the person a delegated call acts for and the chain of actors (RFC 8693
// act, the caller outermost).
type Delegation struct {
	Person  Subject  `json:"person"`
	OrgRole string   `json:"orgRole,omitempty"`
	Groups  []string `json:"groups"`
	Roles   []string `json:"roles"`
	// Actors is the act chain, outermost first: Actors[0] is the caller (ExecContext.Subject).
	Actors []string `json:"actors"`
	// MayAct lists the actors the person's token allows (may_act); nil when it names none,
	// which leaves the choice to the grants.
	MayAct []string `json:"mayAct,omitempty"`
}

// Principal is the subject a call is made for: the person of a delegated call, else the
// caller. Owned resources and connections are the principal's.
func (ec ExecContext) Principal() Subject {
	if ec.Delegation != nil {
		return ec.Delegation.Person
	}
	return ec.Subject
}

// OrgAdmin: the caller administers its org (org_admin or org_owner): they read the org's
// whole audit log and approval queue, not only their own share of it.
func (ec ExecContext) OrgAdmin() bool {
	return ec.OrgRole == "org_owner" || ec.OrgRole == "org_admin"
}

// callerKey is the context key of the verified caller: the one carrier every surface (HTTP,
// MCP tools, MCP tasks) reads it from.
type callerKey struct{}

// callerValue is what the carrier holds: the caller and, when the edge verified it from a
// bearer token in this request, that token (for a token exchange on the caller's behalf).
type callerValue struct {
	ec    ExecContext
	token string
}

// WithCaller is ctx carrying ec, with no bearer token: a call made for ec outside its own
// request (a held call run when approved) can never present another request's token.
func WithCaller(ctx context.Context, ec ExecContext) context.Context {
	return context.WithValue(ctx, callerKey{}, callerValue{ec: ec})
}

// WithVerified is ctx carrying ec and the bearer token it was verified from.
func WithVerified(ctx context.Context, ec ExecContext, token string) context.Context {
	return context.WithValue(ctx, callerKey{}, callerValue{ec: ec, token: token})
}

// CallerOf is the verified caller ctx carries; false when no edge verified one.
func CallerOf(ctx context.Context) (ExecContext, bool) {
	v, ok := ctx.Value(callerKey{}).(callerValue)
	return v.ec, ok
}

// SubjectTokenOf is the bearer token the caller ctx carries was verified from; false when
// ctx carries none.
func SubjectTokenOf(ctx context.Context) (string, bool) {
	v, _ := ctx.Value(callerKey{}).(callerValue)
	return v.token, v.token != ""
}
