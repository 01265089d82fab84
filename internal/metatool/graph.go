package metatool

import (
	"sort"
	"strings"

	"github.com/xemahq/xema/internal/catalog"
)

// graph is the capability graph: resource types are nodes, a capability consumes the types
// its input names and produces the types its output names.
type graph struct {
	consumes  map[string][]string // ref → resource types
	produces  map[string][]string
	producers map[string][]*catalog.Entry // resource type → capabilities producing it
	touching  map[string][]*catalog.Entry // resource type → capabilities consuming or producing it
}

func buildGraph(entries []*catalog.Entry) *graph {
	g := &graph{consumes: map[string][]string{}, produces: map[string][]string{},
		producers: map[string][]*catalog.Entry{}, touching: map[string][]*catalog.Entry{}}
	for _, e := range entries {
		in := annotatedTypes(e.Manifest.InputSchema, false)
		out := annotatedTypes(e.Manifest.OutputSchema, true)
		g.consumes[e.Ref()], g.produces[e.Ref()] = in, out
		for _, t := range out {
			g.producers[t] = append(g.producers[t], e)
		}
		for _, t := range union(in, out) {
			g.touching[t] = append(g.touching[t], e)
		}
	}
	return g
}

// annotatedTypes reads ResourceTypeAnnotation from a schema's properties (and, for outputs,
// its root), sorted and unique.
func annotatedTypes(schema map[string]any, root bool) []string {
	set := map[string]bool{}
	if t, ok := schema[ResourceTypeAnnotation].(string); ok && root {
		set[t] = true
	}
	props, _ := schema["properties"].(map[string]any)
	for _, p := range props {
		if ps, ok := p.(map[string]any); ok {
			if t, ok := ps[ResourceTypeAnnotation].(string); ok {
				set[t] = true
			}
		}
	}
	return keys(set)
}

func union(a, b []string) []string {
	set := map[string]bool{}
	for _, s := range append(append([]string{}, a...), b...) {
		set[s] = true
	}
	return keys(set)
}

func keys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (g *graph) neighbourhood(resourceType string) []*catalog.Entry {
	return g.touching[resourceType]
}

// nounIn finds a known resource type named in a free-text query ("pull request" matches
// change_request only if spelled as the type; underscores and hyphens match spaces).
func (g *graph) nounIn(query string) (string, bool) {
	q := " " + strings.ToLower(query) + " "
	var found []string
	for t := range g.touching {
		for _, form := range []string{t, strings.ReplaceAll(t, "_", " "), strings.ReplaceAll(t, "_", "-")} {
			if strings.Contains(q, " "+form+" ") {
				found = append(found, t)
				break
			}
		}
	}
	if len(found) == 0 {
		return "", false
	}
	sort.Slice(found, func(i, j int) bool {
		return len(found[i]) > len(found[j]) || (len(found[i]) == len(found[j]) && found[i] < found[j])
	})
	return found[0], true
}
