package grant

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"unsafe"
)

// SearchGroup is searchGroups[org][id]: refs of org whose descriptor and grant hold the same
// values in every field search's clean set reads (policies/search.rego, search_group_clean),
// with those values. Search evaluates the conditions on the values once per group, not once
// per ref; the refs' own data is not read again, so the fields below must be all it reads
// (TestSearchGroupsSplitOnEveryField).
type SearchGroup struct {
	// Catalog is capabilities[ref] cut to SearchCapFields.
	Catalog map[string]any `json:"catalog"`
	// Grant is grants[ref][catalog biome][org] cut to SearchGrantFields.
	Grant map[string]any `json:"grant"`
	// Refs are the group's refs, a set (the Rego takes an object's keys as a set in one
	// built-in call, where iterating an array costs an expression a ref); the least is the
	// group's id.
	Refs Set `json:"refs"`
	// Versions holds versions[ref][grant.biomeVersion] cut to SearchCapFields, when there is
	// one: the Rego picks it or the catalog's, as authz.rego's cap does.
	Versions map[string]any `json:"versions"`
}

// searchCap and searchGrant are the fields of a descriptor and of a grant that
// search_group_clean reads (biomeVersion to find the pinned version), as the typed document
// holds them: the grouping key of Build, and the source of SearchCapFields and
// SearchGrantFields.
type searchCap struct {
	CallerConstraint     string `json:"callerConstraint"`
	HumanBaseline        any    `json:"humanBaseline"`
	InstanceGrade        any    `json:"instanceGrade"`
	Lifecycle            string `json:"lifecycle"`
	OutputClassification string `json:"outputClassification"`
	RequiredBindings     []any  `json:"requiredBindings"`
	SafeForAgents        bool   `json:"safeForAgents"`
}

type searchGrant struct {
	Audience     Set    `json:"audience"`
	BiomeVersion string `json:"biomeVersion"`
	Environments Set    `json:"environments"`
	Org          string `json:"org"`
	Profile      string `json:"profile"`
	Subjects     Set    `json:"subjects"`
}

// SearchCapFields and SearchGrantFields name the fields a search group copies.
var (
	SearchCapFields   = jsonFields(reflect.TypeFor[searchCap]())
	SearchGrantFields = jsonFields(reflect.TypeFor[searchGrant]())
)

// searchIndex groups, per org, the refs having a grant of org under their catalog biome
// (the grant a call without a named biome takes, authz.rego's grant_biome) by the values
// of SearchCapFields and SearchGrantFields, and files each group under the subject keys its
// grant names (SubjectsNull for subjects null). It joins and groups data; the Rego decides.
// A field a document omits stays absent from the group, as the Rego would read it.
func searchIndex(grants map[string]map[string]map[string]map[string]any, caps map[string]map[string]any,
	versions map[string]map[string]any) (groupedTo map[string]map[string][]string, groups map[string]map[string]SearchGroup) {
	gr := grouper{}
	for ref, catalog := range caps {
		biome, _ := catalog["biome"].(map[string]any)
		id, ok := biome["id"].(string)
		if !ok {
			continue
		}
		for org, g := range grants[ref][id] {
			grp := SearchGroup{Catalog: cut(catalog, SearchCapFields), Grant: cut(g, SearchGrantFields), Versions: map[string]any{}}
			if v, ok := g["biomeVersion"].(string); ok {
				if pinned, ok := versions[ref][v]; ok {
					grp.Versions[v] = pinned
					if m, ok := pinned.(map[string]any); ok {
						grp.Versions[v] = cut(m, SearchCapFields)
					}
				}
			}
			enc, err := json.Marshal(grp) // maps encode sorted: equal values, equal bytes
			if err != nil {
				continue // not JSON: no group, so its refs are decided one by one
			}
			gr.add(org, ref, string(enc), func() (SearchGroup, []string) { return grp, subjectKeys(g) })
		}
	}
	return gr.index()
}

// typedSearchIndex is searchIndex over the typed document (every field present), keyed by
// the encoding of searchCap and searchGrant: a group's maps are built once, not per ref.
func typedSearchIndex(grants map[string]map[string]map[string]GrantData, caps map[string]CapabilityData,
	versions map[string]map[string]CapabilityData) (groupedTo map[string]map[string][]string, groups map[string]map[string]SearchGroup) {
	type key struct {
		Catalog  searchCap
		Grant    searchGrant
		Versions map[string]searchCap
	}
	gr := grouper{}
	var enc []byte
	sets := setEncodings{}
	for ref, c := range caps {
		for org, g := range grants[ref][c.Biome.ID] {
			k := key{Catalog: searchCapOf(c), Grant: searchGrant{Audience: g.Audience, BiomeVersion: g.BiomeVersion,
				Environments: g.Environments, Org: g.Org, Profile: g.Profile, Subjects: g.Subjects}}
			var err error
			enc, err = sets.appendValue(enc[:0], reflect.ValueOf(k.Catalog))
			if err == nil {
				enc, err = sets.appendValue(enc, reflect.ValueOf(k.Grant))
			}
			if pinned, ok := versions[ref][g.BiomeVersion]; ok && err == nil {
				k.Versions = map[string]searchCap{g.BiomeVersion: searchCapOf(pinned)}
				enc, err = sets.appendValue(append(enc, 'v'), reflect.ValueOf(k.Versions[g.BiomeVersion]))
			}
			if err != nil {
				continue // not JSON: no group, so its refs are decided one by one
			}
			gr.add(org, ref, string(enc), func() (SearchGroup, []string) {
				grp := SearchGroup{Catalog: structMap(k.Catalog), Grant: structMap(k.Grant), Versions: map[string]any{}}
				for v, pinned := range k.Versions {
					grp.Versions[v] = structMap(pinned)
				}
				keys := []string{SubjectsNull}
				if g.Subjects != nil {
					keys = slices.Collect(maps.Keys(g.Subjects))
				}
				return grp, keys
			})
		}
	}
	return gr.index()
}

// setEncodings remembers the encoding of each Set by the map it is: grants share their
// profile's environments and a biome's grant its subjects, so most are encoded once. The
// document's maps are neither changed nor freed while it is indexed.
type setEncodings map[unsafe.Pointer][]byte

// appendValue appends an encoding of v, a searchCap or searchGrant, that equal values share
// and unequal ones do not: each field as JSON (a Set's keys sorted, as encoding/json writes
// them; the generic fields, mostly null, through encoding/json), tab-separated. A JSON
// encoding holds no raw tab. It costs a fraction of json.Marshal over the whole struct.
func (sets setEncodings) appendValue(buf []byte, v reflect.Value) ([]byte, error) {
	for i := range v.NumField() {
		switch f := v.Field(i).Interface().(type) {
		case string:
			buf = strconv.AppendQuote(buf, f)
		case bool:
			buf = strconv.AppendBool(buf, f)
		case Set:
			if f == nil {
				buf = append(buf, "null"...)
				break
			}
			p := reflect.ValueOf(f).UnsafePointer()
			enc, ok := sets[p]
			if !ok {
				for _, k := range slices.Sorted(maps.Keys(f)) {
					enc = strconv.AppendBool(strconv.AppendQuote(enc, k), f[k])
				}
				sets[p] = enc
			}
			buf = append(buf, enc...)
		default:
			raw, err := json.Marshal(f)
			if err != nil {
				return nil, err
			}
			buf = append(buf, raw...)
		}
		buf = append(buf, '\t')
	}
	return buf, nil
}

func searchCapOf(c CapabilityData) searchCap {
	return searchCap{CallerConstraint: c.CallerConstraint, HumanBaseline: c.HumanBaseline, InstanceGrade: c.InstanceGrade,
		Lifecycle: c.Lifecycle, OutputClassification: c.OutputClassification, RequiredBindings: c.RequiredBindings,
		SafeForAgents: c.SafeForAgents}
}

// structMap is the struct v as a map of its JSON field names to its field values.
func structMap(v any) map[string]any {
	rv := reflect.ValueOf(v)
	names := jsonFields(rv.Type())
	m := make(map[string]any, len(names))
	for i, name := range names {
		m[name] = rv.Field(i).Interface()
	}
	return m
}

// grouper collects the search groups of refs by org and encoded values.
type grouper map[string]map[string]*groupMember

type groupMember struct {
	group SearchGroup
	keys  []string // the subject keys it is filed under
	id    string
}

// add puts ref in org's group of the values encoded as key, which values makes (with the
// group's subject keys) the first time.
func (gr grouper) add(org, ref, key string, values func() (SearchGroup, []string)) {
	if gr[org] == nil {
		gr[org] = map[string]*groupMember{}
	}
	m := gr[org][key]
	if m == nil {
		grp, keys := values()
		grp.Refs = Set{}
		m = &groupMember{group: grp, keys: keys, id: ref}
		gr[org][key] = m
	}
	m.group.Refs[ref] = true
	m.id = min(m.id, ref)
}

// index is the groups by org and id, and their ids by org and subject key, sorted.
func (gr grouper) index() (groupedTo map[string]map[string][]string, groups map[string]map[string]SearchGroup) {
	groupedTo, groups = map[string]map[string][]string{}, map[string]map[string]SearchGroup{}
	for org, members := range gr {
		groupedTo[org], groups[org] = map[string][]string{}, make(map[string]SearchGroup, len(members))
		for _, m := range members {
			groups[org][m.id] = m.group
			for _, key := range m.keys {
				groupedTo[org][key] = append(groupedTo[org][key], m.id)
			}
		}
		for _, ids := range groupedTo[org] {
			slices.Sort(ids)
		}
	}
	return groupedTo, groups
}

// subjectKeys are the keys a grant of subjects null or an object of subjects is filed under.
func subjectKeys(g map[string]any) []string {
	subjects, ok := g["subjects"]
	if !ok {
		return nil // never covered
	}
	if subjects == nil {
		return []string{SubjectsNull}
	}
	m, _ := subjects.(map[string]any)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// cut is m with only the named fields it has.
func cut(m map[string]any, fields []string) map[string]any {
	out := make(map[string]any, len(fields))
	for _, f := range fields {
		if v, ok := m[f]; ok {
			out[f] = v
		}
	}
	return out
}
