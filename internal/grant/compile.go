package grant

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/manifest"
	"github.com/xemahq/xema/internal/store"
)

// audienceByKind is the set of output classifications a caller in an environment of each
// kind may receive. Kinds absent (system, org) admit every classification.
var audienceByKind = map[string][]string{
	KindPublic:      {"public"},
	KindStoreReview: {"public"},
	KindSession:     {"public", "internal"},
	KindSandbox:     {"public", "internal"},
	KindTrustedDev:  {"public", "internal", "confidential"},
	KindProject:     {"public", "internal", "confidential"},
	KindApp:         {"public", "internal", "confidential"},
}

// orgRoleRank orders org roles for humanBaseline's minimumOrgRole.
var orgRoleRank = map[string]int{"org_member": 1, "org_admin": 2, "org_owner": 3}

// Input is everything the policy data is compiled from.
type Input struct {
	Capabilities []store.Capability
	// Pinned holds the capabilities of the biome versions effective grants approved where
	// they differ from the catalog's own version: calls under such a grant are decided on
	// the descriptor it approved (data.xema.versions[ref][version]).
	Pinned []store.Capability
	Grants []store.Grant
	// Biomes holds the biome versions the grants name: their requiresCapabilities decide
	// which refs a grant covers.
	Biomes       []store.BiomeVersion
	Environments Environments
	Profiles     Profiles
	// Revision is stamped into data.xema.revision; empty means a hash of this input taken
	// in a canonical order, so replicas compiling the same store state agree on it.
	Revision string
}

// descriptor is the part of a contribution manifest the policy reads. The nested objects
// stay generic JSON so the Rego sees exactly what the author wrote.
type descriptor struct {
	RiskTier             string `json:"riskTier"`
	EffectClass          string `json:"effectClass"`
	OutputClassification string `json:"outputClassification"`
	Reach                string `json:"reach"`
	AuthorityEffect      string `json:"authorityEffect"`
	DescriptorKind       string `json:"descriptorKind"`
	CallerConstraint     string `json:"callerConstraint"`
	RequiresApproval     bool   `json:"requiresApproval"`
	SafeForAgents        *bool  `json:"safeForAgents"`
	Delegable            *bool  `json:"delegable"`
	HumanBaseline        any    `json:"humanBaseline"`
	RequiredBindings     []any  `json:"requiredBindings"`
	InstanceGrade        any    `json:"instanceGrade"`
	// InputSchema is read for its resource property only.
	InputSchema map[string]any `json:"inputSchema"`
}

// Compile builds the data.xema document of docs/policy-data.md (the object under "xema") as
// Build does, handed over as Data.Map: a map whose values are the typed parts, grants laid
// out as nested maps. Treat it as read-only: entries share some sub-objects. The same input
// always compiles to the same document. Any record that does not decode fails the whole
// compile, so a broken store never yields a bundle that silently drops grants.
func Compile(in Input) (map[string]any, error) {
	d, err := Build(in)
	if err != nil {
		return nil, err
	}
	return d.Map(), nil
}

// Build compiles the typed data.xema document.
func Build(in Input) (Data, error) {
	descs := make(map[string]descriptor, len(in.Capabilities)+len(in.Pinned))
	caps := make(map[string]CapabilityData, len(in.Capabilities))
	for _, c := range in.Capabilities {
		d, err := decodeDescriptor(c)
		if err != nil {
			return Data{}, err
		}
		descs[versionKey(c.Ref, c.BiomeVersion)] = d
		caps[c.Ref] = capabilityData(c, d)
	}
	versions := make(map[string]map[string]CapabilityData)
	for _, c := range in.Pinned {
		d, err := decodeDescriptor(c)
		if err != nil {
			return Data{}, err
		}
		descs[versionKey(c.Ref, c.BiomeVersion)] = d
		byVersion := versions[c.Ref]
		if byVersion == nil {
			byVersion = make(map[string]CapabilityData, 1)
			versions[c.Ref] = byVersion
		}
		byVersion[c.BiomeVersion] = capabilityData(c, d)
	}

	profileEnvs := make(map[string]Set, len(in.Profiles))
	profiles := make(map[string]ProfileData, len(in.Profiles))
	for name, p := range in.Profiles {
		profileEnvs[name] = set(in.Environments.OfKinds(p.EnvironmentKinds))
		profiles[name] = profileData(p, profileEnvs[name])
	}

	grants, err := compileGrants(in, descs, profileEnvs)
	if err != nil {
		return Data{}, err
	}

	envs := make(map[string]EnvironmentData)
	for _, name := range in.Environments.Names() {
		kind, _ := in.Environments.Lookup(name)
		envs[name] = EnvironmentData{Kind: kind}
	}
	audience := make(map[string]Set, len(audienceByKind))
	for kind, classes := range audienceByKind {
		audience[kind] = set(classes)
	}
	rev := in.Revision
	if rev == "" {
		rev = inputRevision(in)
	}
	grantedTo, baselined := Index(grants, caps, versions)
	groupedTo, groups := typedSearchIndex(grants, caps, versions)
	return Data{
		GrantedTo:    grantedTo,
		Baselined:    baselined,
		GroupedTo:    groupedTo,
		SearchGroups: groups,
		Audience:     audience,
		Capabilities: caps,
		Environments: envs,
		Grants:       grants,
		OrgRoleRank:  maps.Clone(orgRoleRank),
		Profiles:     profiles,
		Revision:     rev,
		Versions:     versions,
	}, nil
}

func decodeDescriptor(c store.Capability) (descriptor, error) {
	var d descriptor
	if err := json.Unmarshal(c.Manifest, &d); err != nil {
		return d, fmt.Errorf("compile capability %s@%s: manifest: %w", c.Ref, c.BiomeVersion, err)
	}
	return d, nil
}

func versionKey(ref, version string) string { return ref + "\x00" + version }

func capabilityData(c store.Capability, d descriptor) CapabilityData {
	bindings := d.RequiredBindings
	if bindings == nil {
		bindings = []any{}
	}
	return CapabilityData{
		AuthorityEffect:      d.AuthorityEffect,
		Biome:                BiomeData{ID: c.BiomeID, Version: c.BiomeVersion},
		CallerConstraint:     d.CallerConstraint,
		Delegable:            d.Delegable != nil && *d.Delegable,
		DescriptorKind:       d.DescriptorKind,
		EffectClass:          effectiveEffectClass(d.EffectClass),
		HumanBaseline:        d.HumanBaseline,
		InstanceGrade:        d.InstanceGrade,
		Lifecycle:            c.Lifecycle,
		OutputClassification: d.OutputClassification,
		Reach:                d.Reach,
		Resource:             manifest.ResourceProperty(d.InputSchema),
		ReplacedBy:           c.ReplacedBy,
		RequiredBindings:     bindings,
		RequiresApproval:     d.RequiresApproval,
		RiskTier:             d.RiskTier,
		SafeForAgents:        d.SafeForAgents == nil || *d.SafeForAgents,
	}
}

func profileData(p Profile, envs Set) ProfileData {
	return ProfileData{
		Approval:         ApprovalData{EffectClasses: set(p.Approval.EffectClasses), RiskTiers: set(p.Approval.RiskTiers)},
		EffectClasses:    set(p.EffectClasses),
		EnvironmentKinds: set(p.EnvironmentKinds),
		Environments:     envs,
		Quota:            limitData(p.Quota),
		RateLimit:        limitData(p.RateLimit),
		RiskTiers:        set(p.RiskTiers),
	}
}

func limitData(l Limit) LimitData { return LimitData{Per: l.Per, Requests: l.Requests} }

// Scope is one org's install of one biome: at most one grant of it is effective.
type Scope struct{ Org, Biome string }

// Effective returns the effective grant of each (org, biome): the newest approved, ties
// broken by id, unless that one is revoked: then the scope has none (a revoke never brings
// back the grant a change superseded). The policy and the catalog both pin versions by it.
func Effective(grants []store.Grant) map[Scope]store.Grant {
	newest := Newest(grants)
	for k, g := range newest {
		if g.Revoked() {
			delete(newest, k)
		}
	}
	return newest
}

// Newest returns the newest grant of each (org, biome), revoked or not: every other grant
// of the scope is superseded.
func Newest(grants []store.Grant) map[Scope]store.Grant {
	newest := make(map[Scope]store.Grant)
	for _, g := range grants {
		k := Scope{Org: g.Org, Biome: g.BiomeID}
		cur, ok := newest[k]
		if !ok || g.ApprovedAt.After(cur.ApprovedAt) || (g.ApprovedAt.Equal(cur.ApprovedAt) && g.ID > cur.ID) {
			newest[k] = g
		}
	}
	return newest
}

// compileGrants lays grants out as grants[ref][biomeId][org] from the effective grants, each
// judged against the descriptors of the version it approved.
func compileGrants(in Input, descs map[string]descriptor, profileEnvs map[string]Set) (map[string]map[string]map[string]GrantData, error) {
	requires := make(map[string][]string, len(in.Biomes))
	for _, bv := range in.Biomes {
		var b struct {
			RequiresCapabilities []string `json:"requiresCapabilities"`
		}
		if err := json.Unmarshal(bv.Manifest, &b); err != nil {
			return nil, fmt.Errorf("compile biome %s@%s: manifest: %w", bv.ID, bv.Version, err)
		}
		requires[bv.ID+"@"+bv.Version] = b.RequiresCapabilities
	}

	newest := Effective(in.Grants)
	scopes := slices.SortedFunc(maps.Keys(newest), func(a, b Scope) int {
		return strings.Compare(a.Org+"\x00"+a.Biome, b.Org+"\x00"+b.Biome)
	})
	out := make(map[string]map[string]map[string]GrantData)
	for _, scope := range scopes {
		g := newest[scope]
		profile, ok := in.Profiles[g.Profile]
		if !ok {
			return nil, fmt.Errorf("compile grant %s: unknown profile %q", g.ID, g.Profile)
		}
		refs, ok := requires[g.BiomeID+"@"+g.BiomeVersion]
		if !ok {
			return nil, fmt.Errorf("compile grant %s: biome version %s@%s not given", g.ID, g.BiomeID, g.BiomeVersion)
		}
		custom, err := DecodeCustomize(g.Customize)
		if err != nil {
			return nil, fmt.Errorf("compile grant %s: %w", g.ID, err)
		}
		base := grantBase{
			grant: g, profile: profile, envs: profileEnvs[g.Profile],
			rateLimit: limitData(profile.RateLimit), quota: limitData(profile.Quota),
		}
		for _, ref := range refs {
			d, known := descs[versionKey(ref, g.BiomeVersion)]
			c, named := custom[ref]
			entry, ok := base.entry(d, known, c, named)
			if !ok {
				continue
			}
			byBiome := out[ref]
			if byBiome == nil {
				byBiome = make(map[string]map[string]GrantData, 1)
				out[ref] = byBiome
			}
			byOrg := byBiome[scope.Biome]
			if byOrg == nil {
				byOrg = make(map[string]GrantData, 1)
				byBiome[scope.Biome] = byOrg
			}
			byOrg[scope.Org] = entry
		}
	}
	return out, nil
}

// grantBase is what every ref of one grant shares (read-only maps included).
type grantBase struct {
	grant            store.Grant
	profile          Profile
	envs             Set
	rateLimit, quota LimitData
}

// entry is one compiled grant of a ref. A ref the admin named in customize is granted on
// their say-so; otherwise the profile must admit its effect class and risk tier. The
// customization wins field by field, except that it cannot waive an approval the
// capability itself requires.
func (b grantBase) entry(d descriptor, known bool, c Customization, named bool) (GrantData, bool) {
	effect := effectiveEffectClass(d.EffectClass)
	if !named && (!known || !b.profile.Admits(effect, d.RiskTier)) {
		return GrantData{}, false
	}
	// An unknown descriptor is granted only by name, and waits for a human by default.
	approval := !known || b.profile.NeedsApproval(effect, d.RiskTier)
	if c.RequiresApproval != nil {
		approval = *c.RequiresApproval
	}
	e := GrantData{
		BiomeVersion:     b.grant.BiomeVersion,
		Environments:     b.envs,
		GrantID:          b.grant.ID,
		Org:              b.grant.Org,
		Profile:          b.grant.Profile,
		Quota:            b.quota,
		RateLimit:        b.rateLimit,
		RequiresApproval: approval || d.RequiresApproval,
	}
	if c.Environments != nil {
		e.Environments = set(c.Environments)
	}
	if c.Subjects != nil {
		e.Subjects = set(c.Subjects)
	}
	if c.Resources != nil {
		e.Resources = slices.Clone(c.Resources)
	}
	if c.Audience != nil {
		e.Audience = set(c.Audience)
	}
	if c.RateLimit != nil {
		e.RateLimit = limitData(*c.RateLimit)
	}
	if c.Quota != nil {
		e.Quota = limitData(*c.Quota)
	}
	return e, true
}

// inputRevision hashes everything the document is compiled from, records sorted by key and
// every string length-prefixed, so equal store states give equal revisions whatever the
// order the store listed them in. Cheaper than hashing the compiled document.
func inputRevision(in Input) string {
	h := sha256.New()
	put := func(parts ...string) {
		for _, p := range parts {
			fmt.Fprintf(h, "%d:%s", len(p), p)
		}
	}
	caps := slices.SortedFunc(slices.Values(in.Capabilities), func(a, b store.Capability) int { return strings.Compare(a.Ref, b.Ref) })
	for _, c := range caps {
		put("cap", c.Ref, c.BiomeID, c.BiomeVersion, c.Lifecycle, c.ReplacedBy, string(c.Manifest))
	}
	grants := slices.SortedFunc(slices.Values(in.Grants), func(a, b store.Grant) int { return strings.Compare(a.ID, b.ID) })
	for _, g := range grants {
		put("grant", g.ID, g.Org, g.BiomeID, g.BiomeVersion, g.Profile, string(g.Customize), g.ApprovedAt.UTC().Format(time.RFC3339Nano))
		if g.Revoked() { // only then: the revision of a store without revokes stays what it was
			put("revoked")
		}
	}
	pinned := slices.SortedFunc(slices.Values(in.Pinned), func(a, b store.Capability) int {
		return strings.Compare(a.Ref+"@"+a.BiomeVersion, b.Ref+"@"+b.BiomeVersion)
	})
	for _, c := range pinned {
		put("pinned", c.Ref, c.BiomeID, c.BiomeVersion, c.Lifecycle, c.ReplacedBy, string(c.Manifest))
	}
	biomes := slices.SortedFunc(slices.Values(in.Biomes), func(a, b store.BiomeVersion) int {
		return strings.Compare(a.ID+"@"+a.Version, b.ID+"@"+b.Version)
	})
	for _, bv := range biomes {
		put("biome", bv.ID, bv.Version, string(bv.Manifest))
	}
	for _, name := range in.Environments.Names() {
		kind, _ := in.Environments.Lookup(name)
		put("env", name, kind)
	}
	// Maps encode with sorted keys; these cannot fail to encode.
	fixed, _ := json.Marshal([]any{in.Profiles, audienceByKind, orgRoleRank})
	put("fixed", string(fixed))
	return "sha256:" + hex.EncodeToString(h.Sum(nil)[:8])
}
