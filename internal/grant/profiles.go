package grant

import (
	_ "embed"
	"fmt"
	"maps"
	"slices"
)

// Profile is a built-in permission profile: which capabilities of a biome a grant covers
// by default, where, how often, and which calls wait for a human.
type Profile struct {
	Description string `json:"description"`
	// EffectClasses and RiskTiers a capability must both match to be covered without
	// being named in the grant's customize.
	EffectClasses []string `json:"effectClasses"`
	RiskTiers     []string `json:"riskTiers"`
	// EnvironmentKinds: a grant without its own environments admits every named
	// environment of these kinds.
	EnvironmentKinds []string `json:"environmentKinds"`
	RateLimit        Limit    `json:"rateLimit"`
	Quota            Limit    `json:"quota"`
	// Approval: a call needs a human's approval when its effect class or its risk tier is
	// listed here (or when the capability itself says so).
	Approval ApprovalRule `json:"approval"`
}

// ApprovalRule lists the effect classes and risk tiers whose calls need approval.
type ApprovalRule struct {
	EffectClasses []string `json:"effectClasses"`
	RiskTiers     []string `json:"riskTiers"`
}

// Admits reports whether the profile covers a capability of this effect class and risk tier.
func (p Profile) Admits(effectClass, riskTier string) bool {
	return contains(p.EffectClasses, effectClass) && contains(p.RiskTiers, riskTier)
}

// NeedsApproval reports whether the profile makes calls of this effect class or risk tier
// wait for a human.
func (p Profile) NeedsApproval(effectClass, riskTier string) bool {
	return contains(p.Approval.EffectClasses, effectClass) || contains(p.Approval.RiskTiers, riskTier)
}

// Profiles maps profile names to profiles.
type Profiles map[string]Profile

//go:embed profiles.json
var builtinJSON []byte

// Builtin returns the five built-in profiles (profiles.json, documented in docs/profiles.md).
func Builtin() Profiles {
	p, err := parseProfiles(builtinJSON)
	if err != nil {
		panic(fmt.Sprintf("grant: embedded profiles.json: %v", err))
	}
	return p
}

// Names returns the profile names, sorted.
func (ps Profiles) Names() []string {
	return slices.Sorted(maps.Keys(ps))
}

func parseProfiles(data []byte) (Profiles, error) {
	var ps Profiles
	if err := strictUnmarshal(data, &ps); err != nil {
		return nil, err
	}
	for _, name := range ps.Names() {
		if err := ps[name].check(); err != nil {
			return nil, fmt.Errorf("profile %q: %w", name, err)
		}
	}
	return ps, nil
}

func (p Profile) check() error {
	for _, c := range append(slices.Clone(p.EffectClasses), p.Approval.EffectClasses...) {
		if !contains(effectClasses, c) {
			return fmt.Errorf("unknown effect class %q", c)
		}
	}
	for _, t := range append(slices.Clone(p.RiskTiers), p.Approval.RiskTiers...) {
		if !contains(riskTiers, t) {
			return fmt.Errorf("unknown risk tier %q", t)
		}
	}
	for _, k := range p.EnvironmentKinds {
		if !contains(Kinds, k) {
			return fmt.Errorf("unknown environment kind %q", k)
		}
	}
	if err := p.RateLimit.check(maxRateRequests); err != nil {
		return fmt.Errorf("rateLimit: %w", err)
	}
	if err := p.Quota.check(maxQuotaRequests); err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	return nil
}
