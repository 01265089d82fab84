package policy

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/xemahq/xema/internal/bounded"
	"github.com/xemahq/xema/internal/telemetry"
)

// DefaultDecisionCacheSize bounds the decision cache of an Engine whose Options leave it 0.
const DefaultDecisionCacheSize = 16384

// CacheStats counts the decision cache of the serving bundle since it was loaded.
type CacheStats struct {
	// Enabled is false when the cache is off: by Options, or because the compiled policy
	// calls a non-deterministic built-in (http.send, time.now_ns, rand.intn, ...), whose
	// answer may change between two identical inputs.
	Enabled bool
	// Reason says why it is off ("" when on).
	Reason  string
	Hits    uint64
	Misses  uint64
	Entries int
}

// decisionCache memoises decisions of one compiled bundle (so one revision: a new Load
// brings a new, empty cache) by the canonical encoding of the input. A decision is a pure
// function of (revision, input) only while no non-deterministic built-in is in the
// policy; Load checks that before enabling it.
//
// Bounded by two generations of at most size/2 entries each (bounded.Map, an approximate
// LRU with O(1) work).
type decisionCache struct {
	entries      *bounded.Map[string, Decision]
	hits, misses atomic.Uint64
}

func newDecisionCache(size int) *decisionCache {
	return &decisionCache{entries: bounded.New[string, Decision](size)}
}

func (c *decisionCache) get(key string) (Decision, bool) {
	d, ok := c.entries.Get(key, nil)
	telemetry.Cache("decision", ok)
	if ok {
		c.hits.Add(1)
		return d.clone(), true
	}
	c.misses.Add(1)
	return Decision{}, false
}

func (c *decisionCache) put(key string, d Decision) {
	c.entries.Put(key, d.clone()) // the caller keeps its own slices
}

func (c *decisionCache) stats() CacheStats {
	return CacheStats{Enabled: true, Hits: c.hits.Load(), Misses: c.misses.Load(), Entries: c.entries.Len()}
}

// clone copies the slices, so no two holders of a decision share them.
func (d Decision) clone() Decision {
	d.Reasons = cloneSlice(d.Reasons)
	d.Suggestions = cloneSlice(d.Suggestions)
	d.Obligations = cloneSlice(d.Obligations)
	return d
}

// cloneSlice keeps nil nil and empty empty (the decision JSON tells [] from null).
func cloneSlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append(make([]T, 0, len(s)), s...)
}

// cacheKey encodes every field of in, length-prefixed and in a fixed order (map keys
// sorted), so two inputs share a key only when the policy sees the same input document.
func cacheKey(in Input) string {
	var b strings.Builder
	b.Grow(256)
	s := func(v string) {
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
	list := func(vs []string) {
		if vs == nil {
			b.WriteByte('~') // nil and empty build the same input ([]), but stay exact
		}
		b.WriteString(strconv.Itoa(len(vs)))
		b.WriteByte('[')
		for _, v := range vs {
			s(v)
		}
	}
	flags := func(m map[string]bool) {
		if m == nil {
			b.WriteByte('~')
			return
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString(strconv.Itoa(len(keys)))
		b.WriteByte('{')
		for _, k := range keys {
			s(k)
			if m[k] {
				b.WriteByte('1')
			} else {
				b.WriteByte('0')
			}
		}
	}
	for _, v := range []string{in.Ref, in.Biome, in.Subject.Kind, in.Subject.Ref, in.OrgRole, in.Org,
		in.Project, in.Session, in.Environment, in.Resource, in.ResourceOwner} {
		s(v)
	}
	list(in.Groups)
	list(in.Roles)
	list(in.Armed)
	if u := in.Usage; u != nil {
		b.WriteString("u")
		b.WriteString(strconv.FormatBool(u.RateExceeded))
		b.WriteString(strconv.FormatBool(u.QuotaExceeded))
		s(strconv.Itoa(u.RetryAfterSeconds))
	} else {
		b.WriteByte('~')
	}
	flags(in.Bindings)
	flags(in.InstanceRelations)
	if a := in.Approval; a != nil {
		b.WriteString("a")
		s(a.Requester)
		s(a.ApprovalID)
		s(a.Org)
	} else {
		b.WriteByte('~')
	}
	if c := in.Connection; c != nil {
		b.WriteString("c")
		for _, v := range []string{c.Provider, c.Owner, c.Person, c.Status, c.ID, c.ConnectURL} {
			s(v)
		}
	} else {
		b.WriteByte('~')
	}
	if d := in.Delegation; d != nil {
		b.WriteString("d")
		s(d.Person.Kind)
		s(d.Person.Ref)
		s(d.OrgRole)
		list(d.Groups)
		list(d.Roles)
		list(d.Actors)
		list(d.MayAct)
	} else {
		b.WriteByte('~')
	}
	return b.String()
}

// nondeterministicBuiltins lists the non-deterministic built-ins (ast.Builtin.Nondeterministic)
// that modules call, sorted; empty means a decision depends only on the bundle and the input.
func nondeterministicBuiltins(mods []*ast.Module) []string {
	found := map[string]bool{}
	for _, m := range mods {
		ast.WalkRefs(m, func(r ast.Ref) bool {
			name := r.String()
			if b, ok := ast.BuiltinMap[name]; ok && b.Nondeterministic {
				found[name] = true
			}
			return false
		})
	}
	names := make([]string, 0, len(found))
	for n := range found {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
