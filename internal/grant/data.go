package grant

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"sort"
	"strings"
)

// The types of data.xema, field for field as docs/policy-data.md describes it. Fields are
// declared in the alphabetical order of their JSON names: encoding/json writes struct fields
// in declaration order and map keys sorted, so a Data encodes to exactly the bytes the
// untyped document of maps did (TestDataGolden holds that).

// Data is the data.xema document.
type Data struct {
	// Audience[environmentKind] is the set of output classifications a caller in an
	// environment of that kind may receive; a kind absent admits every classification.
	Audience map[string]Set `json:"audience"`
	// Baselined are the refs whose catalog or pinned descriptor carries a humanBaseline
	// (Index): search's first cut for users (policies/search.rego).
	Baselined Set `json:"baselined"`
	// Capabilities[ref] is the catalog's descriptor of each published ref.
	Capabilities map[string]CapabilityData `json:"capabilities"`
	// Environments[name] is each named environment's kind.
	Environments map[string]EnvironmentData `json:"environments"`
	// GrantedTo[org][subject] are the refs with a grant filed under org naming that subject
	// key, "*" for subjects null (Index): search's first cut (policies/search.rego).
	GrantedTo map[string]map[string]Set `json:"grantedTo"`
	// Grants[ref][biomeId][org] is the effective grant of the ref in each org.
	Grants map[string]map[string]map[string]GrantData `json:"grants"`
	// GroupedTo[org][subject] are the ids of the SearchGroups of org whose grant names that
	// subject key, SubjectsNull for subjects null (searchIndex).
	GroupedTo   map[string]map[string][]string `json:"groupedTo"`
	OrgRoleRank map[string]int                 `json:"orgRoleRank"`
	Profiles    map[string]ProfileData         `json:"profiles"`
	Revision    string                         `json:"revision"`
	// SearchGroups[org][id] groups the refs whose search conditions read the same values
	// (searchIndex): search's clean set decides a group once (policies/search.rego).
	SearchGroups map[string]map[string]SearchGroup `json:"searchGroups"`
	// Versions[ref][biomeVersion] is the descriptor of a version an effective grant pins,
	// where it differs from the catalog's.
	Versions map[string]map[string]CapabilityData `json:"versions"`
}

// WithIndex returns data (an untyped data.xema document, e.g. hand-written for a test or a
// benchmark) with its indexes built by Index and searchIndex, as Build builds them. The
// search groups are built from the document as written: a field it omits stays absent
// (the typed document would make it a zero value the Rego reads differently).
func WithIndex(data map[string]any) (map[string]any, error) {
	var typed struct {
		Grants       map[string]map[string]map[string]GrantData `json:"grants"`
		Capabilities map[string]CapabilityData                  `json:"capabilities"`
		Versions     map[string]map[string]CapabilityData       `json:"versions"`
	}
	var untyped struct {
		Grants       map[string]map[string]map[string]map[string]any `json:"grants"`
		Capabilities map[string]map[string]any                       `json:"capabilities"`
		Versions     map[string]map[string]any                       `json:"versions"`
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("index data.xema: %w", err)
	}
	if err := json.Unmarshal(raw, &typed); err != nil {
		return nil, fmt.Errorf("index data.xema: %w", err)
	}
	if err := json.Unmarshal(raw, &untyped); err != nil {
		return nil, fmt.Errorf("index data.xema: %w", err)
	}
	grantedTo, baselined := Index(typed.Grants, typed.Capabilities, typed.Versions)
	groupedTo, groups := searchIndex(untyped.Grants, untyped.Capabilities, untyped.Versions)
	out := maps.Clone(data)
	out["grantedTo"], out["baselined"] = grantedTo, baselined
	out["groupedTo"], out["searchGroups"] = groupedTo, groups
	return out, nil
}

// SubjectsNull is the GrantedTo key of grants whose subjects are null.
const SubjectsNull = "*"

// Index builds GrantedTo[org][subject] — the refs with a grant filed under org naming that
// subject key (SubjectsNull for subjects null) — and Baselined, the refs whose catalog or
// pinned descriptor carries a humanBaseline. Each is a set: the Rego takes an object's keys
// as a set in one built-in call, where iterating an array costs an expression a ref. It is
// an index of what the data says, not a decision: search.rego decides what it means.
func Index(grants map[string]map[string]map[string]GrantData, caps map[string]CapabilityData,
	versions map[string]map[string]CapabilityData) (grantedTo map[string]map[string]Set, baselined Set) {
	grantedTo = map[string]map[string]Set{}
	add := func(org, key, ref string) {
		if grantedTo[org] == nil {
			grantedTo[org] = map[string]Set{}
		}
		if grantedTo[org][key] == nil {
			grantedTo[org][key] = Set{}
		}
		grantedTo[org][key][ref] = true
	}
	for ref, byBiome := range grants {
		for _, byOrg := range byBiome {
			for org, g := range byOrg {
				if g.Subjects == nil {
					add(org, SubjectsNull, ref)
				}
				for key := range g.Subjects {
					add(org, key, ref)
				}
			}
		}
	}
	baselined = Set{}
	for ref, c := range caps {
		if c.HumanBaseline != nil {
			baselined[ref] = true
		}
	}
	for ref, byVersion := range versions {
		for _, c := range byVersion {
			if c.HumanBaseline != nil {
				baselined[ref] = true
			}
		}
	}
	return grantedTo, baselined
}

// Set is a JSON object set: {"a": true, "b": true}. A nil Set encodes as null.
type Set map[string]bool

// EnvironmentData is environments[name].
type EnvironmentData struct {
	Kind string `json:"kind"`
}

// BiomeData names the biome version declaring a capability.
type BiomeData struct {
	ID      string `json:"id"`
	Version string `json:"version"`
}

// CapabilityData is capabilities[ref] (and versions[ref][version]): the descriptor fields of
// the manifest the Rego reads, with the catalog entry's lifecycle. The nested objects stay
// generic JSON so the Rego sees exactly what the author wrote.
type CapabilityData struct {
	AuthorityEffect  string    `json:"authorityEffect"`
	Biome            BiomeData `json:"biome"`
	CallerConstraint string    `json:"callerConstraint"`
	// Delegable: a caller acting for a person may call it (policies/delegation.rego).
	Delegable            bool   `json:"delegable"`
	DescriptorKind       string `json:"descriptorKind"`
	EffectClass          string `json:"effectClass"`
	HumanBaseline        any    `json:"humanBaseline"`
	InstanceGrade        any    `json:"instanceGrade"`
	Lifecycle            string `json:"lifecycle"`
	OutputClassification string `json:"outputClassification"`
	Reach                string `json:"reach"`
	ReplacedBy           string `json:"replacedBy"`
	RequiredBindings     []any  `json:"requiredBindings"` // never null: [] when none
	RequiresApproval     bool   `json:"requiresApproval"`
	// Resource is the input property naming the resource a call acts on ("" when none): a
	// grant restricting resources denies a call that does not name it.
	Resource      string `json:"resource"`
	RiskTier      string `json:"riskTier"`
	SafeForAgents bool   `json:"safeForAgents"`
}

// LimitData is a rate limit or quota: requests per window.
type LimitData struct {
	Per      string `json:"per"`
	Requests int    `json:"requests"`
}

// ApprovalData is a profile's approval rules.
type ApprovalData struct {
	EffectClasses Set `json:"effectClasses"`
	RiskTiers     Set `json:"riskTiers"`
}

// ProfileData is profiles[name].
type ProfileData struct {
	Approval         ApprovalData `json:"approval"`
	EffectClasses    Set          `json:"effectClasses"`
	EnvironmentKinds Set          `json:"environmentKinds"`
	Environments     Set          `json:"environments"`
	Quota            LimitData    `json:"quota"`
	RateLimit        LimitData    `json:"rateLimit"`
	RiskTiers        Set          `json:"riskTiers"`
}

// GrantData is grants[ref][biomeId][org]. Subjects, Resources and Audience are null when the
// grant does not narrow them.
type GrantData struct {
	Audience         Set       `json:"audience"`
	BiomeVersion     string    `json:"biomeVersion"`
	Environments     Set       `json:"environments"`
	GrantID          string    `json:"grantId"`
	Org              string    `json:"org"`
	Profile          string    `json:"profile"`
	Quota            LimitData `json:"quota"`
	RateLimit        LimitData `json:"rateLimit"`
	RequiresApproval bool      `json:"requiresApproval"`
	Resources        []string  `json:"resources"`
	Subjects         Set       `json:"subjects"`
}

// Map is the document as Compile has always handed it over: every object of data.xema that
// is keyed by name (refs, biomes, orgs, versions, profiles, environments, kinds) a
// map[string]any, which is what callers index into, holding the typed values; a grant entry
// is a map of its fields. It encodes to the same bytes as d.
func (d Data) Map() map[string]any {
	grants := make(map[string]any, len(d.Grants))
	for ref, byBiome := range d.Grants {
		bm := make(map[string]any, len(byBiome))
		for biome, byOrg := range byBiome {
			om := make(map[string]any, len(byOrg))
			for org, g := range byOrg {
				om[org] = fieldsOf(g)
			}
			bm[biome] = om
		}
		grants[ref] = bm
	}
	versions := make(map[string]any, len(d.Versions))
	for ref, byVersion := range d.Versions {
		versions[ref] = anyMap(byVersion)
	}
	grantedTo := make(map[string]any, len(d.GrantedTo))
	for org, byKey := range d.GrantedTo {
		grantedTo[org] = anyMap(byKey)
	}
	groupedTo := make(map[string]any, len(d.GroupedTo))
	for org, byKey := range d.GroupedTo {
		km := make(map[string]any, len(byKey))
		for key, ids := range byKey {
			km[key] = anyList(ids)
		}
		groupedTo[org] = km
	}
	groups := make(map[string]any, len(d.SearchGroups))
	for org, byID := range d.SearchGroups {
		groups[org] = anyMap(byID)
	}
	ranks := make(map[string]any, len(d.OrgRoleRank))
	for role, rank := range d.OrgRoleRank {
		ranks[role] = rank
	}
	return map[string]any{
		"audience":     anyMap(d.Audience),
		"baselined":    d.Baselined,
		"capabilities": anyMap(d.Capabilities),
		"environments": anyMap(d.Environments),
		"grantedTo":    grantedTo,
		"grants":       grants,
		"groupedTo":    groupedTo,
		"orgRoleRank":  ranks,
		"profiles":     anyMap(d.Profiles),
		"revision":     d.Revision,
		"searchGroups": groups,
		"versions":     versions,
	}
}

func anyList(refs []string) []any {
	out := make([]any, len(refs))
	for i, r := range refs {
		out[i] = r
	}
	return out
}

func anyMap[V any](m map[string]V) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

var grantFields = jsonFields(reflect.TypeFor[GrantData]())

// fieldsOf is g as a map of its JSON field names to its field values.
func fieldsOf(g GrantData) map[string]any {
	v := reflect.ValueOf(g)
	m := make(map[string]any, len(grantFields))
	for i, name := range grantFields {
		m[name] = v.Field(i).Interface()
	}
	return m
}

// jsonFields is the JSON name of each field of the struct type t, by index. The types above
// tag every field with a plain name (no omitempty, no "-"), which TestDataFieldsOf checks.
func jsonFields(t reflect.Type) []string {
	names := make([]string, t.NumField())
	for i := range names {
		names[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	return names
}

// Covering reads back, from a document Map made, the grants of org covering ref: one per
// biome whose effective grant covers it, in biome order.
func Covering(data map[string]any, org, ref string) []GrantData {
	grants, _ := data["grants"].(map[string]any)
	byBiome, _ := grants[ref].(map[string]any)
	biomes := make([]string, 0, len(byBiome))
	for b := range byBiome {
		biomes = append(biomes, b)
	}
	sort.Strings(biomes)
	var out []GrantData
	for _, b := range biomes {
		byOrg, _ := byBiome[b].(map[string]any)
		fields, ok := byOrg[org].(map[string]any)
		if !ok {
			continue
		}
		raw, err := json.Marshal(fields)
		if err != nil {
			continue // Map's values always encode
		}
		var g GrantData
		if json.Unmarshal(raw, &g) == nil {
			out = append(out, g)
		}
	}
	return out
}
