// Package explain is the one source of what a caller is told about a decision: which of the
// policy's suggestions it can act on, the exact grant that would unlock the capability, and
// the next steps in words. The denial of a call (HTTP and MCP), why-denied (HTTP, the CLI, the
// console) and the explain meta-tool (HTTP and MCP) all answer with Of, so they cannot
// disagree. What a grant can lift is the policy's to say (its request-grant suggestions,
// policies/suggestions.rego); this package only turns that into a permission and words.
package explain

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/manifest"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/ratelimit"
)

// Case is one decision to explain: the capability, the caller, and what the policy said.
type Case struct {
	Capability   string // the ref
	BiomeID      string // the biome serving it ("" when the catalog no longer knows the ref)
	BiomeVersion string
	Subject      string // the caller's subject ref
	Environment  string
	Allowed      bool
	Reasons      []policy.Reason
	Suggestions  []policy.Suggestion
	// Obligations of the decision: an allowed call's limits, for explaining RATE_LIMITED and
	// QUOTA_EXCEEDED when the reason itself is not among Reasons (explain asked live).
	Obligations []policy.Obligation
	// Role is the org role that holds the capability for this caller without a grant
	// (RoleHolding), "" when none does.
	Role string
	// Asked is the reason code the caller asks about (explain's denialCode), "" for all.
	Asked string
}

// Permission is the exact grant that would unlock a capability.
type Permission struct {
	BiomeID      string   `json:"biomeId"`
	BiomeVersion string   `json:"biomeVersion"`
	Capability   string   `json:"capability"`
	Environments []string `json:"environments"`
	Subjects     []string `json:"subjects"`
}

// Explanation is what the caller is told: the suggestions it can act on (each a
// policy.Suggestion), the grant that would unlock the call, and Next, the steps in words (one
// sentence when nothing the caller can ask for would help).
type Explanation struct {
	Suggestions []policy.Suggestion `json:"suggestions"`
	Permissions []Permission        `json:"permissions"`
	Next        []string            `json:"next"`
}

// Nothing is the step when no grant, role, environment or wait would allow the call.
const Nothing = "No grant, role or change of environment would allow this call."

// Reason codes explained here by more than the policy's suggestions.
const (
	codeBaseline = "HUMAN_BASELINE_NOT_MET"
)

// RoleHolding is the org role that holds a capability of human baseline hb for a caller of
// subjectKind without a grant: only people hold capabilities by role.
func RoleHolding(hb *manifest.HumanBaseline, subjectKind string) string {
	if hb == nil || subjectKind != "user" {
		return ""
	}
	switch hb.Kind {
	case "org-administrators":
		return "org_admin"
	case "org-role":
		return hb.MinimumOrgRole
	}
	return ""
}

// For is the case of decision d on catalog entry e (nil when the catalog no longer knows the
// ref) for subject in environment.
func For(e *catalog.Entry, subject policy.Subject, environment string, d policy.Decision) Case {
	c := Case{Subject: subject.Ref, Environment: environment, Allowed: d.Allow,
		Reasons: d.Reasons, Suggestions: d.Suggestions, Obligations: d.Obligations}
	if e != nil {
		c.Capability, c.BiomeID, c.BiomeVersion = e.Ref(), e.Capability.BiomeID, e.Capability.BiomeVersion
		c.Role = RoleHolding(e.Manifest.HumanBaseline, subject.Kind)
	}
	return c
}

// Of explains c. It is idempotent: explaining an explanation's suggestions again (why-denied
// reads the ones the denial recorded) gives the same answer.
func Of(c Case) Explanation {
	x := Explanation{Suggestions: []policy.Suggestion{}, Permissions: []Permission{}, Next: []string{}}
	byRole := c.Role != "" && !c.Allowed && hasReason(c.Reasons, codeBaseline)
	if byRole {
		// Held by role (kernel administration, say): a member denied a submit needs
		// org_admin, never a grant.
		x.Suggestions = append(x.Suggestions, policy.Suggestion{Kind: "request-role", Capability: c.Capability, Role: c.Role, Environment: c.Environment})
	}
	grantable := false
	for _, s := range c.Suggestions {
		switch {
		case s.Kind == "request-role":
			continue // added above, from the capability's baseline, when it applies
		case s.Kind == "request-grant" && (c.Allowed || byRole):
			continue // the caller holds the call (or a role would): a grant changes nothing
		case s.Kind == "request-grant":
			grantable = true
		}
		if !slices.Contains(x.Suggestions, s) {
			x.Suggestions = append(x.Suggestions, s)
		}
	}
	if grantable && c.BiomeID != "" {
		x.Permissions = append(x.Permissions, Permission{BiomeID: c.BiomeID, BiomeVersion: c.BiomeVersion, Capability: c.Capability,
			Environments: unlocking(c.Environment, x.Suggestions), Subjects: []string{subjectOf(c.Subject, x.Suggestions)}})
	}
	for _, s := range x.Suggestions {
		x.Next = append(x.Next, Words(s))
	}
	x.Next = append(x.Next, waits(c)...)
	switch {
	case len(x.Next) > 0:
	case !c.Allowed:
		x.Next = append(x.Next, Nothing)
	case c.Asked != "":
		x.Next = append(x.Next, "the policy allows this call now: "+c.Asked+" no longer applies")
	}
	return x
}

// Words says in a sentence what a suggestion asks the caller to do.
func Words(s policy.Suggestion) string {
	switch s.Kind {
	case "request-grant":
		who := ""
		if s.Subject != "" {
			who = " to " + s.Subject
		}
		return fmt.Sprintf("ask an org admin to grant %s%s in environment %s", s.Capability, who, s.Environment)
	case "switch-environment":
		return fmt.Sprintf("call from environment %s instead of %s (the grant admits it there)", s.To, s.From)
	case "request-approval":
		return fmt.Sprintf("each call of %s waits for a person's approval: ask an approver", s.Capability)
	case "request-role":
		return fmt.Sprintf("ask for org role %s (it holds %s without a grant)", s.Role, s.Capability)
	case "use-successor":
		return fmt.Sprintf("call %s instead", s.Capability)
	case "establish-binding":
		return fmt.Sprintf("establish binding %s first, with %s", s.Binding, s.Capability)
	case "connect":
		whose := "your own account"
		if s.Owner == "org" {
			whose = "the org's account (an org admin does)"
		}
		return fmt.Sprintf("connect %s to %s at %s, then call again", whose, s.Server, s.URL)
	}
	return fmt.Sprintf("%s %s", s.Kind, s.Capability)
}

// waits are the steps of a limit: when to retry. A denial carries the seconds in its reason's
// detail (the policy was told the usage); asked live (explain, the caller under the limit
// again), the limit's obligation names the window.
func waits(c Case) []string {
	if (c.Asked == ratelimit.CodeRateLimited || c.Asked == ratelimit.CodeQuotaExceeded) && !hasReason(c.Reasons, c.Asked) {
		return limits(c.Asked, c.Obligations)
	}
	var out []string
	for _, r := range c.Reasons {
		switch r.Code {
		case ratelimit.CodeRateLimited:
			out = append(out, "wait, then retry: "+r.Detail+" (the denial's Retry-After header and retryAfter field say when)")
		case ratelimit.CodeQuotaExceeded:
			out = append(out, "wait for the quota's window to end, then retry: "+r.Detail+" (the denial's retryAfter says when)")
		}
	}
	return out
}

// limits says when a rate-limited or over-quota caller may retry, from the limits of the
// decision.
func limits(code string, obs []policy.Obligation) []string {
	kind := map[string]string{ratelimit.CodeRateLimited: "rate-limit", ratelimit.CodeQuotaExceeded: "quota"}[code]
	var out []string
	for _, o := range obs {
		if o.Kind == kind && kind != "" {
			out = append(out, fmt.Sprintf("wait, then retry: the %s admits %d calls per %s; a denial's Retry-After says when its window ends", o.Kind, o.Requests, o.Per))
		}
	}
	return out
}

func hasReason(rs []policy.Reason, code string) bool {
	return slices.ContainsFunc(rs, func(r policy.Reason) bool { return r.Code == code })
}

// unlocking are where a grant would help: the environments the policy's suggestions name (it
// knows the audience and profile rules), else the caller's.
func unlocking(current string, suggestions []policy.Suggestion) []string {
	var envs []string
	for _, s := range suggestions {
		env := s.Environment
		if s.Kind == "switch-environment" {
			env = s.To
		}
		if s.Kind != "request-role" && env != "" && !slices.Contains(envs, env) {
			envs = append(envs, env)
		}
	}
	if len(envs) == 0 {
		return []string{current}
	}
	return envs
}

// subjectOf is whom the grant must name: the policy's request-grant says so when the grant
// exists but does not cover the caller; else the caller.
func subjectOf(caller string, suggestions []policy.Suggestion) string {
	for _, s := range suggestions {
		if s.Kind == "request-grant" && s.Subject != "" {
			return s.Subject
		}
	}
	return caller
}

// Denial is a denial as the caller is told it, by the call's answer and by why-denied: the
// audited denial with the explanation's suggestions, the grant that would unlock it and the
// next steps.
type Denial struct {
	audit.Denial
	Permissions []Permission `json:"permissions"`
	Next        []string     `json:"next"`
}

// Deny dresses the audited denial den with its explanation x.
func Deny(den audit.Denial, x Explanation) Denial {
	if raw, err := json.Marshal(x.Suggestions); err == nil { // a slice of string fields: never fails
		den.Suggestions = raw
	}
	return Denial{Denial: den, Permissions: x.Permissions, Next: x.Next}
}

// Recorded is the case of a recorded denial: its reasons and the suggestions the caller was
// told, on entry (nil when the catalog no longer knows the ref). A record whose reasons or
// suggestions do not decode is an error.
func Recorded(e *catalog.Entry, den audit.Denial) (Case, error) {
	var d policy.Decision
	if err := json.Unmarshal(den.Reasons, &d.Reasons); err != nil {
		return Case{}, fmt.Errorf("audit record %s: reasons: %w", den.AuditID, err)
	}
	if err := json.Unmarshal(den.Suggestions, &d.Suggestions); err != nil {
		return Case{}, fmt.Errorf("audit record %s: suggestions: %w", den.AuditID, err)
	}
	c := For(e, policy.Subject{Kind: den.Subject.Kind, Ref: den.Subject.Ref}, den.Environment, d)
	c.Capability = den.Capability
	return c, nil
}
