// Package manifest reads and validates biome directories and capability contributions
// against the JSON Schemas in schemas/ (the single source of truth for authors, the linter
// and the ingestion API).
package manifest

import "encoding/json"

// Biome is a parsed biome.json plus every contribution found for it (files and inline).
type Biome struct {
	ID                   string           `json:"id"`
	Version              string           `json:"version"`
	RequiresCapabilities []string         `json:"requiresCapabilities"`
	PermissionHints      []PermissionHint `json:"permissionHints"`
	DefaultProfile       string           `json:"defaultProfile"`
	Xema                 *BiomeXema       `json:"xema,omitempty"`

	// Contributions holds contribution files and inline entries alike; not part of biome.json.
	Contributions []Contribution `json:"-"`
}

// PermissionHint is the human-readable reason for one required capability.
type PermissionHint struct {
	Capability string `json:"capability"`
	Reason     string `json:"reason"`
}

// BiomeXema is the optional xema section of biome.json.
type BiomeXema struct {
	Contributions *struct {
		Inline []json.RawMessage `json:"inline,omitempty"`
	} `json:"contributions,omitempty"`
}

// Contribution is one capability contribution: WHAT it is (Manifest) and optionally HOW it
// is invoked. Together they are the publish-time CapabilitySyncManifest.
type Contribution struct {
	Kind       string      `json:"kind"`
	Manifest   Manifest    `json:"manifest"`
	Invocation *Invocation `json:"invocation,omitempty"`

	// Source is the file the contribution came from (biome.json for inline entries) and
	// SourcePath the JSON pointer of the contribution in it ("" for a contribution file),
	// so later errors can point at what the author wrote. Not part of the payload.
	Source     string `json:"-"`
	SourcePath string `json:"-"`
}

// Invocation is a declared invocation binding.
type Invocation struct {
	Kind      string `json:"kind"` // http
	URL       string `json:"url,omitempty"`
	TimeoutMs int    `json:"timeoutMs,omitempty"`
}

// Manifest mirrors the capability manifest of schemas/contribution.schema.json (the
// repository's rendering of the design's capability-contribution spec) field for field. Free-form values
// (inputSchema, outputSchema, examples) hold numbers as json.Number, never rounded floats.
type Manifest struct {
	Ref                         string                    `json:"ref"`
	Title                       string                    `json:"title"`
	Summary                     string                    `json:"summary"`
	SideEffects                 string                    `json:"sideEffects"`
	InputSchema                 map[string]any            `json:"inputSchema"`
	OutputSchema                map[string]any            `json:"outputSchema"`
	RiskTier                    string                    `json:"riskTier"`
	RequiresApproval            bool                      `json:"requiresApproval"`
	Examples                    []map[string]any          `json:"examples,omitempty"`
	ExternalServiceRef          string                    `json:"externalServiceRef,omitempty"`
	DefaultCredentialBindingRef string                    `json:"defaultCredentialBindingRef,omitempty"`
	OutputClassification        string                    `json:"outputClassification,omitempty"`
	AuthorityEffect             string                    `json:"authorityEffect,omitempty"`
	Reach                       string                    `json:"reach,omitempty"`
	EffectClass                 string                    `json:"effectClass,omitempty"`
	TrustedContextProjection    *TrustedContextProjection `json:"trustedContextProjection,omitempty"`
	RequiredBindings            []RequiredBinding         `json:"requiredBindings,omitempty"`
	SafeForAgents               *bool                     `json:"safeForAgents,omitempty"`
	HumanBaseline               *HumanBaseline            `json:"humanBaseline,omitempty"`
	Delegable                   *bool                     `json:"delegable,omitempty"`
	InstanceGrade               *InstanceGrade            `json:"instanceGrade,omitempty"`
	DescriptorKind              string                    `json:"descriptorKind,omitempty"`
	CallerConstraint            string                    `json:"callerConstraint,omitempty"`
}

// TrustedContextProjection: see the spec.
type TrustedContextProjection struct {
	SchemaVersion int    `json:"schemaVersion"`
	Profile       string `json:"profile"`
	Delivery      string `json:"delivery"`
}

// RequiredBinding names a role binding the capability needs before it can run.
type RequiredBinding struct {
	RoleKey             RoleKey `json:"roleKey"`
	OwnerKind           string  `json:"ownerKind"`
	RemedyCapabilityRef string  `json:"remedyCapabilityRef,omitempty"`
}

// RoleKey identifies a role on a kind of resource.
type RoleKey struct {
	ResourceKind string `json:"resourceKind"`
	Role         string `json:"role"`
	Qualifier    string `json:"qualifier,omitempty"`
}

// HumanBaseline is the discriminated union of how humans may hold a capability.
type HumanBaseline struct {
	Kind           string              `json:"kind"` // explicit-only | org-role | org-administrators
	MinimumOrgRole string              `json:"minimumOrgRole,omitempty"`
	Environments   []string            `json:"environments,omitempty"`
	Dimensions     map[string][]string `json:"dimensions,omitempty"`
}

// MarshalJSON writes environments whenever the kind requires them (even when empty), so a
// validated HumanBaseline always encodes back to a valid one.
func (h HumanBaseline) MarshalJSON() ([]byte, error) {
	type plain HumanBaseline // no MarshalJSON: no recursion
	if h.Kind == "explicit-only" {
		return json.Marshal(plain(h))
	}
	return json.Marshal(struct {
		plain
		Environments []string `json:"environments"`
	}{plain(h), nonNil(h.Environments)})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// InstanceGrade: grants on individual instances of a resource type.
type InstanceGrade struct {
	ResourceType string   `json:"resourceType"`
	Relation     string   `json:"relation"`
	Environments []string `json:"environments"`
}
