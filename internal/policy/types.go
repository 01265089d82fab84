package policy

import "slices"

// Input is one call as the Rego sees it (docs/policy-data.md, "input").
type Input struct {
	Ref string `json:"ref"`
	// Biome names the installed biome the call runs for, whose grant applies; empty means
	// the biome that declares Ref.
	Biome       string   `json:"biome,omitempty"`
	Subject     Subject  `json:"subject"`
	Groups      []string `json:"groups"`
	Roles       []string `json:"roles"`
	OrgRole     string   `json:"orgRole,omitempty"`
	Org         string   `json:"org,omitempty"`
	Project     string   `json:"project,omitempty"`
	Session     string   `json:"session,omitempty"`
	Environment string   `json:"environment"`
	// Resource is the named resource, empty when the call names none.
	Resource string `json:"resource,omitempty"`
	// ResourceOwner is the subject ref owning Resource, as resolved by the gateway.
	ResourceOwner string   `json:"resourceOwner,omitempty"`
	Armed         []string `json:"armed"`
	// Usage is set by the rate limiter; nil means within limits.
	Usage *Usage `json:"usage,omitempty"`
	// Bindings holds the caller's role bindings, keyed "resourceKind/role[/qualifier]".
	Bindings map[string]bool `json:"bindings,omitempty"`
	// InstanceRelations holds the caller's relations on Resource, keyed "resourceType#relation".
	InstanceRelations map[string]bool `json:"instanceRelations,omitempty"`
	// Approval is set when the subject is deciding a held call of Ref; nil otherwise.
	Approval *Approval `json:"approval,omitempty"`
	// Delegation is set when Subject acts for a person; nil otherwise.
	Delegation *Delegation `json:"delegation,omitempty"`
	// Connection is set when the capability is served through a connection (an
	// OAuth-protected provider the gateway holds an org's or a person's tokens for); nil
	// otherwise.
	Connection *Connection `json:"connection,omitempty"`
}

// Connection is whose connection a call needs and whether it is connected
// (policies/connection.rego): a call runs only through a connected one.
type Connection struct {
	// Provider is the provider (an MCP server's provider id) the connection is to.
	Provider string `json:"provider"`
	// Owner is "org" (the org's one account) or "user" (the person's own).
	Owner string `json:"owner"`
	// Person is the person whose own connection a "user" connection is: the caller, or the
	// person a delegated call acts for; "" when the call has no person.
	Person string `json:"person,omitempty"`
	// Status is "connected", "missing" or "needs-reconnect".
	Status string `json:"status"`
	// ID is the connection's id when there is one (the audit record names it).
	ID string `json:"id,omitempty"`
	// ConnectURL is where the owner connects it (the console's Connections page).
	ConnectURL string `json:"connectUrl,omitempty"`
}

// Delegation is the person a delegated call acts for (policies/delegation.rego): the
// capability must be delegable, the person must hold it (their baseline or a grant that
// covers them) and, when their token limits who may act for them (MayAct), the caller must
// be one of those.
type Delegation struct {
	Person  Subject  `json:"person"`
	OrgRole string   `json:"orgRole,omitempty"`
	Groups  []string `json:"groups"`
	Roles   []string `json:"roles"`
	// Actors is the act chain, outermost (the caller, Subject) first.
	Actors []string `json:"actors"`
	// MayAct is nil (null) when the person's token names no allowed actor; an empty list
	// allows none.
	MayAct []string `json:"mayAct"`
}

// Approval names the held call an approver is deciding, so the policy can refuse its
// requester (OWN_APPROVAL) and anyone but a person (APPROVER_NOT_HUMAN).
type Approval struct {
	Requester  string `json:"requester"`
	ApprovalID string `json:"approvalId"`
	// Org is the held call's org; the policy denies an approver of another org.
	Org string `json:"org"`
}

// Subject is who calls: Kind is user, agent, workflow or service; Ref is "kind:name".
type Subject struct {
	Kind string `json:"kind"`
	Ref  string `json:"ref"`
}

// Usage is the counting state the rate limiter owns.
type Usage struct {
	RateExceeded      bool `json:"rateExceeded"`
	QuotaExceeded     bool `json:"quotaExceeded"`
	RetryAfterSeconds int  `json:"retryAfterSeconds"`
}

// Decision is data.xema.authz.decision.
type Decision struct {
	Allow       bool         `json:"allow"`
	Reasons     []Reason     `json:"reasons"`
	Suggestions []Suggestion `json:"suggestions"`
	Obligations []Obligation `json:"obligations"`
	// Revision is the bundle revision that decided, for the audit record.
	Revision string `json:"revision"`
}

// Reason is one denial: a stable code and a sentence for people.
type Reason struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// Suggestion kinds: request-grant, switch-environment, request-approval, use-successor,
// establish-binding; explain adds request-role.
type Suggestion struct {
	Kind        string `json:"kind"`
	Capability  string `json:"capability,omitempty"`
	Environment string `json:"environment,omitempty"`
	From        string `json:"from,omitempty"`
	To          string `json:"to,omitempty"`
	Binding     string `json:"binding,omitempty"`
	// Role is the org role of a request-role suggestion (explain: a capability held by role).
	Role string `json:"role,omitempty"`
	// Subject is whom a request-grant must name: a grant exists and does not cover the caller.
	Subject string `json:"subject,omitempty"`
	// Server, Owner and URL are a connect suggestion's: the provider to connect, whose
	// account ("org" or "user") and the console page that connects it.
	Server string `json:"server,omitempty"`
	Owner  string `json:"owner,omitempty"`
	URL    string `json:"url,omitempty"`
}

// Obligation kinds: approval, rate-limit and quota (with Requests per Per).
type Obligation struct {
	Kind     string `json:"kind"`
	Requests int    `json:"requests,omitempty"`
	Per      string `json:"per,omitempty"`
}

// ObligationApproval is the obligation an allowing decision carries when a person must
// approve the call before it runs.
const ObligationApproval = "approval"

// Held says the decision allows the call only once a person approves it.
func (d Decision) Held() bool {
	return d.Allow && slices.ContainsFunc(d.Obligations, func(o Obligation) bool { return o.Kind == ObligationApproval })
}
