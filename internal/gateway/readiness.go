package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/store"
)

// PreflightRequest is `{ref}`.
type PreflightRequest struct {
	Ref string `json:"ref"`
}

// Requirement is one condition a call needs; Met says whether it holds now.
type Requirement struct {
	Kind   string `json:"kind"` // grant | runner | lifecycle | binding | approval
	Detail string `json:"detail"`
	Met    bool   `json:"met"`
}

// Blocker is a requirement that does not hold, with the denial code it would produce.
type Blocker struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// PreflightResult is `{ready, requirements, blockers}`.
type PreflightResult struct {
	Ready        bool          `json:"ready"`
	Requirements []Requirement `json:"requirements"`
	Blockers     []Blocker     `json:"blockers"`
}

// Preflight checks, without running anything, whether a call to ref could succeed now.
func (g *Gateway) Preflight(ctx context.Context, ec identity.ExecContext, req PreflightRequest) (*PreflightResult, error) {
	e, ok := g.d.Catalog.Snapshot().For(ec.Org, req.Ref)
	if !ok {
		return nil, unknownCapability(req.Ref)
	}
	d, err := g.d.Policy.Decide(ctx, policyInput(ec, e.Ref(), ""))
	if err != nil {
		return nil, unavailable(CodePolicyUnavailable, "policy", err)
	}
	res := &PreflightResult{Requirements: []Requirement{}, Blockers: []Blocker{}}
	add := func(kind, detail string, met bool, code string) {
		res.Requirements = append(res.Requirements, Requirement{Kind: kind, Detail: detail, Met: met})
		if !met {
			res.Blockers = append(res.Blockers, Blocker{Code: code, Detail: detail})
		}
	}
	lifecycleOK := e.Capability.Lifecycle == store.LifecyclePublished || e.Capability.Lifecycle == store.LifecycleDeprecated
	add("lifecycle", fmt.Sprintf("%s is %s", e.Ref(), e.Capability.Lifecycle), lifecycleOK, "NOT_PUBLISHED")
	_, runErr := g.resolve(ctx, ec, e)
	runnerCode, runnerDetail := CodeNoRunner, "a runner serves "+e.Ref()
	var re *fault.Error
	if errors.As(runErr, &re) {
		runnerCode, runnerDetail = re.Code, re.Message // e.g. MISSING_BINDING, MISSING_CREDENTIAL
	}
	add("runner", runnerDetail, runErr == nil, runnerCode)
	grantDetail := "the policy admits this caller in " + ec.Environment
	if !d.Allow {
		codes := make([]string, 0, len(d.Reasons))
		for _, r := range d.Reasons {
			codes = append(codes, r.Code)
		}
		grantDetail = fmt.Sprintf("the policy denies this caller in %s (%s)", ec.Environment, strings.Join(codes, ", "))
	}
	add("grant", grantDetail, d.Allow, CodeDenied)
	for _, r := range d.Reasons {
		res.Blockers = append(res.Blockers, Blocker{Code: r.Code, Detail: r.Detail})
	}
	for _, o := range d.Obligations {
		if o.Kind == obligationApproval {
			res.Requirements = append(res.Requirements, Requirement{Kind: "approval", Detail: "each call waits for a human approval", Met: true})
		}
	}
	res.Ready = len(res.Blockers) == 0
	return res, nil
}

// ExplainRequest is `{capabilityRef, denialCode}`.
type ExplainRequest struct {
	CapabilityRef string `json:"capabilityRef"`
	DenialCode    string `json:"denialCode"`
}

// Permission is the exact grant that would unlock a capability.
type Permission struct {
	BiomeID      string   `json:"biomeId"`
	BiomeVersion string   `json:"biomeVersion"`
	Capability   string   `json:"capability"`
	Environments []string `json:"environments"`
	Subjects     []string `json:"subjects"`
	Profile      string   `json:"profile,omitempty"`
}

// ExplainResult is `{permissions, domain, biome, suggestions}`.
type ExplainResult struct {
	Permissions []Permission        `json:"permissions"`
	Domain      string              `json:"domain"`
	Biome       BiomeRef            `json:"biome"`
	DenialCode  string              `json:"denialCode"`
	Reasons     []policy.Reason     `json:"reasons"`
	Suggestions []policy.Suggestion `json:"suggestions"`
}

// grantReasons are the reason codes a grant (or a wider one) can lift; any other denial (a
// platform rule, the lifecycle, the caller's kind or role, a limit) is not lifted by a grant,
// so explain offers none for it.
var grantReasons = map[string]bool{
	"MISSING_GRANT": true, "ENVIRONMENT_NOT_ALLOWED": true, "SUBJECT_NOT_COVERED": true,
	"RESOURCE_NOT_REACHABLE": true, "GRANT_ORG_MISMATCH": true, "AUDIENCE_INCOMPATIBLE": true,
}

// GrantLiftable reports whether a grant (or a wider one) can lift a denial of reason code:
// what explain answers a grant for, and why-denied points to explain for.
func GrantLiftable(code string) bool { return grantReasons[code] }

// Explain turns a denial code into what would unlock the capability for this caller in its
// current environment: the exact grant when a grant is what is missing, the org role when
// the capability is held by role (humanBaseline), never what the caller already holds.
func (g *Gateway) Explain(ctx context.Context, ec identity.ExecContext, req ExplainRequest) (*ExplainResult, error) {
	if req.DenialCode == "" {
		return nil, badRequest("INVALID_ARGUMENT", "missing required field /denialCode")
	}
	if !g.d.Policy.KnownReasonCode(req.DenialCode) {
		return nil, badRequest("INVALID_ARGUMENT", fmt.Sprintf("/denialCode: %q is not a reason code a denial can carry; known: %s",
			req.DenialCode, strings.Join(g.d.Policy.ReasonCodes(), ", ")))
	}
	e, ok := g.d.Catalog.Snapshot().For(ec.Org, req.CapabilityRef)
	if !ok {
		return nil, unknownCapability(req.CapabilityRef)
	}
	d, err := g.d.Policy.Decide(ctx, policyInput(ec, e.Ref(), ""))
	if err != nil {
		return nil, unavailable(CodePolicyUnavailable, "policy", err)
	}
	res := &ExplainResult{
		Domain: domainOf(e.Ref()), DenialCode: req.DenialCode,
		Biome:       BiomeRef{ID: e.Capability.BiomeID, Version: e.Capability.BiomeVersion},
		Reasons:     []policy.Reason{},
		Suggestions: []policy.Suggestion{},
		Permissions: []Permission{},
	}
	byGrant, byRole := false, false
	for _, r := range d.Reasons {
		if r.Code == req.DenialCode {
			res.Reasons = append(res.Reasons, r)
		}
		byGrant = byGrant || grantReasons[r.Code]
		byRole = byRole || r.Code == "HUMAN_BASELINE_NOT_MET"
	}
	// A capability held by org role (kernel administration, say) is unlocked by the role,
	// not by a grant: a member denied a submit needs org_admin.
	role := ""
	if hb := e.Manifest.HumanBaseline; byRole && hb != nil && ec.Subject.Kind == "user" {
		switch hb.Kind {
		case "org-administrators":
			role = "org_admin"
		case "org-role":
			role = hb.MinimumOrgRole
		}
	}
	if role != "" {
		byGrant = false
		res.Suggestions = append(res.Suggestions, policy.Suggestion{Kind: "request-role", Capability: e.Ref(), Role: role, Environment: ec.Environment})
	}
	for _, s := range d.Suggestions {
		if s.Kind == "request-grant" && (!byGrant || d.Allow) {
			continue // the caller holds the grant: asking for it again changes nothing
		}
		res.Suggestions = append(res.Suggestions, s)
	}
	if byGrant && !d.Allow {
		res.Permissions = append(res.Permissions, Permission{
			BiomeID: e.Capability.BiomeID, BiomeVersion: e.Capability.BiomeVersion, Capability: e.Ref(),
			Environments: unlockingEnvironments(ec.Environment, d.Suggestions), Subjects: []string{ec.Subject.Ref},
		})
	}
	return res, nil
}

// unlockingEnvironments are where a grant would help: the environments the policy's own
// suggestions name (it knows the audience and profile rules), else the caller's.
func unlockingEnvironments(current string, suggestions []policy.Suggestion) []string {
	var envs []string
	seen := map[string]bool{}
	for _, s := range suggestions {
		env := s.Environment
		if s.Kind == "switch-environment" {
			env = s.To
		}
		if env != "" && !seen[env] {
			seen[env] = true
			envs = append(envs, env)
		}
	}
	if len(envs) == 0 {
		return []string{current}
	}
	return envs
}
