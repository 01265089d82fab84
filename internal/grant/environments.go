package grant

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Environment kinds of the contribution schema.
const (
	KindSystem      = "system"
	KindOrg         = "org"
	KindProject     = "project"
	KindApp         = "app"
	KindSession     = "session"
	KindSandbox     = "sandbox"
	KindPublic      = "public"
	KindStoreReview = "store-review"
	KindTrustedDev  = "trusted-dev"
)

// Kinds lists every environment kind, in the schema's order.
var Kinds = []string{KindSystem, KindOrg, KindProject, KindApp, KindSession, KindSandbox, KindPublic, KindStoreReview, KindTrustedDev}

var envName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// Environments maps environment names (what a token's environment claim and a grant name)
// to their kind (what profiles, audience rules and humanBaseline speak of).
type Environments struct {
	kinds map[string]string
}

// DefaultEnvironments has one environment per kind, named after it, plus the spec's
// `public-session` of kind public.
func DefaultEnvironments() Environments {
	m := make(map[string]string, len(Kinds)+1)
	for _, k := range Kinds {
		m[k] = k
	}
	m["public-session"] = KindPublic
	return Environments{kinds: m}
}

// ParseEnvironments reads NAME=KIND pairs (`xema serve --environments prod=project`, or the
// config file's `environments: {prod: project}`) and adds them to the defaults.
func ParseEnvironments(pairs []string) (Environments, error) {
	cfg := make(map[string]string, len(pairs))
	for _, p := range pairs {
		name, kind, ok := strings.Cut(p, "=")
		if !ok || name == "" || kind == "" {
			return Environments{}, fmt.Errorf("environment %q: want NAME=KIND, e.g. prod=project", p)
		}
		if old, dup := cfg[name]; dup && old != kind {
			return Environments{}, fmt.Errorf("environment %q: named twice, as %q and %q", name, old, kind)
		}
		cfg[name] = kind
	}
	return DefaultEnvironments().With(cfg)
}

// With returns a copy that also knows the given name → kind pairs. A default name keeps its
// kind: redefining `public` as a sandbox would silently change every grant naming it.
func (e Environments) With(cfg map[string]string) (Environments, error) {
	out := Environments{kinds: maps.Clone(e.kinds)}
	if out.kinds == nil {
		out.kinds = map[string]string{}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg)) {
		kind := cfg[name]
		if !envName.MatchString(name) {
			return Environments{}, fmt.Errorf("environment %q: name must match %s", name, envName)
		}
		if !contains(Kinds, kind) {
			return Environments{}, fmt.Errorf("environment %q: unknown kind %q (one of %v)", name, kind, Kinds)
		}
		if old, ok := out.kinds[name]; ok && old != kind {
			return Environments{}, fmt.Errorf("environment %q: already of kind %q, cannot become %q", name, old, kind)
		}
		out.kinds[name] = kind
	}
	return out, nil
}

// Lookup returns the kind of a named environment.
func (e Environments) Lookup(name string) (kind string, ok bool) {
	kind, ok = e.kinds[name]
	return kind, ok
}

// Names returns every environment name, sorted.
func (e Environments) Names() []string {
	return slices.Sorted(maps.Keys(e.kinds))
}

// OfKinds returns the names of the environments whose kind is in kinds, sorted.
func (e Environments) OfKinds(kinds []string) []string {
	var names []string
	for _, name := range e.Names() {
		if contains(kinds, e.kinds[name]) {
			names = append(names, name)
		}
	}
	return names
}
