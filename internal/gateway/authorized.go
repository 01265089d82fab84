package gateway

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/xemahq/xema/internal/bounded"
	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/identity"
)

// callersPerView bounds the callers whose authorized sets one org's view keeps (each is two
// bits per capability of the org: 2.5 KB at 10,000).
const callersPerView = 1024

// orgView is what search, describe and plan read of one snapshot for one org, derived once
// per snapshot: the entries the org sees, their positions, the capability graph over them,
// and per caller which of them the policy admits.
type orgView struct {
	entries []*catalog.Entry
	index   map[string]int // ref → position in entries
	graph   *graph
	// authorized is keyed by the policy revision and the caller's policy input without ref
	// and resource: all a search decision depends on.
	authorized *bounded.Map[string, *authorizedSet]
}

// view is org's view of snap, built on first use and dropped with the snapshot.
func (g *Gateway) view(snap *catalog.Snapshot, org string) *orgView {
	return snap.Derived("gateway.orgView\x00"+org, func() any {
		entries := snap.AllFor(org)
		index := make(map[string]int, len(entries))
		for i, e := range entries {
			index[e.Ref()] = i
		}
		return &orgView{entries: entries, index: index, graph: buildGraph(entries),
			authorized: bounded.New[string, *authorizedSet](callersPerView)}
	}).(*orgView)
}

// authorizedSet remembers, for one caller, which entries of a view the policy admitted: an
// entry is decided once, when a search, describe or plan first needs it.
type authorizedSet struct {
	mu             sync.Mutex
	known, allowed []uint64
}

func (s *authorizedSet) get(i int) (allowed, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, bit := i/64, uint64(1)<<(i%64)
	return s.allowed[w]&bit != 0, s.known[w]&bit != 0
}

func (s *authorizedSet) set(i int, allowed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, bit := i/64, uint64(1)<<(i%64)
	s.known[w] |= bit
	if allowed {
		s.allowed[w] |= bit
	}
}

// authorizer answers whether one caller may invoke entries of one view.
type authorizer struct {
	g    *Gateway
	ec   identity.ExecContext
	view *orgView
	set  *authorizedSet // nil: nothing is remembered (the policy is not deterministic)
}

// authorizer returns the caller's authorizer over org's view of snap. Answers are
// remembered only while the engine caches decisions: a policy calling a non-deterministic
// built-in (or a cache turned off) is asked every time.
func (g *Gateway) authorizer(snap *catalog.Snapshot, ec identity.ExecContext) authorizer {
	v := g.view(snap, ec.Org)
	a := authorizer{g: g, ec: ec, view: v}
	if !g.d.Policy.CacheStats().Enabled {
		return a
	}
	caller, err := json.Marshal(policyInput(ec, "", ""))
	if err != nil {
		return a
	}
	key := g.d.Policy.Revision() + "\x00" + string(caller)
	if s, ok := v.authorized.Get(key, nil); ok {
		a.set = s
		return a
	}
	words := (len(v.entries) + 63) / 64
	a.set = &authorizedSet{known: make([]uint64, words), allowed: make([]uint64, words)}
	v.authorized.Put(key, a.set)
	return a
}

// allows reports whether the caller is armed and authorized for e (an approval obligation
// still counts: the call can be made, it waits for a person). A failed decision is a no,
// and is not remembered.
func (a authorizer) allows(ctx context.Context, e *catalog.Entry) bool {
	i, indexed := a.view.index[e.Ref()]
	indexed = indexed && a.view.entries[i] == e
	if a.set != nil && indexed {
		if allowed, known := a.set.get(i); known {
			return allowed
		}
	}
	d, err := a.g.d.Policy.Decide(ctx, policyInput(a.ec, e.Ref(), ""))
	if err != nil {
		return false
	}
	if a.set != nil && indexed {
		a.set.set(i, d.Allow)
	}
	return d.Allow
}
