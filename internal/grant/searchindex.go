package grant

import (
	"encoding/json"
	"reflect"
	"slices"
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

// SearchCapFields and SearchGrantFields are the fields of a descriptor and of a grant that
// search_group_clean reads; biomeVersion is read to find the pinned version.
var (
	SearchCapFields   = []string{"callerConstraint", "humanBaseline", "instanceGrade", "lifecycle", "outputClassification", "requiredBindings", "safeForAgents"}
	SearchGrantFields = []string{"audience", "biomeVersion", "environments", "org", "profile", "subjects"}
)

// searchIndex groups, per org, the refs having a grant of org under their catalog biome
// (the grant a call without a named biome takes, authz.rego's grant_biome) by the values
// of SearchCapFields and SearchGrantFields, and files each group under the subject keys its
// grant names (SubjectsNull for subjects null). It joins and groups data; the Rego decides.
// A field a document omits stays absent from the group, as the Rego would read it.
func searchIndex(grants map[string]map[string]map[string]map[string]any, caps map[string]map[string]any,
	versions map[string]map[string]any) (groupedTo map[string]map[string][]string, groups map[string]map[string]SearchGroup) {
	type member struct {
		group SearchGroup
		keys  []string
		id    string
	}
	byKey := map[string]map[string]*member{} // org → the group's values encoded → the group
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
			if byKey[org] == nil {
				byKey[org] = map[string]*member{}
			}
			m := byKey[org][string(enc)]
			if m == nil {
				grp.Refs = Set{}
				m = &member{group: grp, keys: subjectKeys(g), id: ref}
				byKey[org][string(enc)] = m
			}
			m.group.Refs[ref] = true
			m.id = min(m.id, ref)
		}
	}
	groupedTo, groups = map[string]map[string][]string{}, map[string]map[string]SearchGroup{}
	for org, members := range byKey {
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

// typedSearchIndex is searchIndex over the typed document, as the Rego reads it: every
// field present.
func typedSearchIndex(grants map[string]map[string]map[string]GrantData, caps map[string]CapabilityData,
	versions map[string]map[string]CapabilityData) (groupedTo map[string]map[string][]string, groups map[string]map[string]SearchGroup) {
	ug := make(map[string]map[string]map[string]map[string]any, len(grants))
	for ref, byBiome := range grants {
		ub := make(map[string]map[string]map[string]any, len(byBiome))
		for biome, byOrg := range byBiome {
			uo := make(map[string]map[string]any, len(byOrg))
			for org, g := range byOrg {
				uo[org] = fieldsNamed(reflect.ValueOf(g), grantFields, SearchGrantFields)
			}
			ub[biome] = uo
		}
		ug[ref] = ub
	}
	uc := make(map[string]map[string]any, len(caps))
	for ref, c := range caps {
		m := fieldsNamed(reflect.ValueOf(c), capFields, SearchCapFields)
		m["biome"] = map[string]any{"id": c.Biome.ID}
		uc[ref] = m
	}
	uv := make(map[string]map[string]any, len(versions))
	for ref, byVersion := range versions {
		vm := make(map[string]any, len(byVersion))
		for v, c := range byVersion {
			vm[v] = fieldsNamed(reflect.ValueOf(c), capFields, SearchCapFields)
		}
		uv[ref] = vm
	}
	return searchIndex(ug, uc, uv)
}

var capFields = jsonFields(reflect.TypeFor[CapabilityData]())

// fieldsNamed is the struct v as a map of the wanted fields' JSON names (names by field
// index) to their values, each as it encodes (a nil Set is null, as in the document).
func fieldsNamed(v reflect.Value, names, wanted []string) map[string]any {
	m := make(map[string]any, len(wanted))
	for i, name := range names {
		if slices.Contains(wanted, name) {
			m[name] = plain(v.Field(i).Interface())
		}
	}
	return m
}

// plain is x as encoding/json decodes its encoding into an any, so a typed and an untyped
// document group alike (a Set becomes map[string]any, a nil Set nil).
func plain(x any) any {
	switch x := x.(type) {
	case Set:
		if x == nil {
			return nil
		}
		m := make(map[string]any, len(x))
		for k, v := range x {
			m[k] = v
		}
		return m
	case string, bool, nil:
		return x
	}
	raw, err := json.Marshal(x)
	if err != nil {
		return x
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		return x
	}
	return out
}
