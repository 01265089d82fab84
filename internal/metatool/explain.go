package metatool

import (
	"context"
	"strings"

	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/policy"
)

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
func (m *Tools) Explain(ctx context.Context, ec identity.ExecContext, req ExplainRequest) (*ExplainResult, error) {
	if req.DenialCode == "" {
		return nil, invalidArgument("missing required field /denialCode")
	}
	if !m.d.Policy.KnownReasonCode(req.DenialCode) {
		return nil, invalidArgument("/denialCode: %q is not a reason code a denial can carry; known: %s",
			req.DenialCode, strings.Join(m.d.Policy.ReasonCodes(), ", "))
	}
	e, d, err := m.decide(ctx, ec, req.CapabilityRef)
	if err != nil {
		return nil, err
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
