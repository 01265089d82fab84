package metatool

import (
	"context"
	"encoding/json"
	"math/bits"
	"strings"
	"sync"

	"github.com/xemahq/xema/internal/bounded"
	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/gateway"
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
	text    []searchText   // per entry, what a query matches
	graph   *graph
	// authorized is keyed by the policy revision and the caller's policy input without ref
	// and resource: all a search decision depends on.
	authorized *bounded.Map[string, *authorizedSet]
}

// view is org's view of snap, built on first use and dropped with the snapshot.
func (m *Tools) view(snap *catalog.Snapshot, org string) *orgView {
	return snap.Derived("metatool.orgView\x00"+org, func() any {
		entries := snap.AllFor(org)
		index := make(map[string]int, len(entries))
		text := make([]searchText, len(entries))
		for i, e := range entries {
			index[e.Ref()] = i
			text[i] = searchText{ref: strings.ToLower(e.Ref()), title: strings.ToLower(e.Manifest.Title),
				summary: strings.ToLower(e.Manifest.Summary)}
		}
		return &orgView{entries: entries, index: index, text: text, graph: buildGraph(entries),
			authorized: bounded.New[string, *authorizedSet](callersPerView)}
	}).(*orgView)
}

// authorizedSet remembers, for one caller, which entries of a view the policy admitted: an
// entry is decided once, when a search, describe or plan first needs it.
// Once every entry is decided, the admitted ones are listed: a search then reads only those.
type authorizedSet struct {
	mu             sync.Mutex
	known, allowed []uint64
	n, decided     int
	list           []int // positions admitted, once decided == n
	cut            bool  // the policy's first cut is applied
}

func newAuthorizedSet(n int) *authorizedSet {
	words := (n + 63) / 64
	return &authorizedSet{known: make([]uint64, words), allowed: make([]uint64, words), n: n}
}

// applyCut decides, the first time it is called, each entry the policy's first cut
// answers for: the entries outside the cut (cut holds positions) are denied, those of clean
// in the cut allowed. It touches the positions given and a bit per entry, not the entries:
// at 100,000 entries a pass over them cost ~25 ms of cache misses.
func (s *authorizedSet) applyCut(cut, clean []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		return
	}
	s.cut = true
	inCut := make([]uint64, len(s.known))
	for _, i := range cut {
		inCut[i/64] |= uint64(1) << (i % 64)
	}
	for _, i := range clean {
		w, bit := i/64, uint64(1)<<(i%64)
		if inCut[w]&bit != 0 && s.known[w]&bit == 0 {
			s.known[w] |= bit
			s.allowed[w] |= bit
			s.decided++
		}
	}
	for w := range s.known {
		outside := ^inCut[w] &^ s.known[w]
		if last := s.n - w*64; last < 64 {
			outside &= uint64(1)<<last - 1
		}
		s.known[w] |= outside
		s.decided += bits.OnesCount64(outside)
	}
	s.listIfDecided()
}

// needsCut reports whether the first cut is still to be applied.
func (s *authorizedSet) needsCut() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.cut
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
	if s.known[w]&bit != 0 {
		return
	}
	s.known[w] |= bit
	if allowed {
		s.allowed[w] |= bit
	}
	s.decided++
	s.listIfDecided()
}

// listIfDecided lists the admitted positions once every entry is decided; s.mu is held.
func (s *authorizedSet) listIfDecided() {
	if s.decided != s.n || s.list != nil {
		return
	}
	s.list = []int{}
	for j := range s.n {
		if s.allowed[j/64]&(uint64(1)<<(j%64)) != 0 {
			s.list = append(s.list, j)
		}
	}
}

// admitted lists the positions the policy admitted, or nil while some are undecided.
func (s *authorizedSet) admitted() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.list
}

// authorizer answers whether one caller may invoke entries of one view.
type authorizer struct {
	m    *Tools
	ec   identity.ExecContext
	view *orgView
	set  *authorizedSet // nil: nothing is remembered (the policy is not deterministic)
}

// authorizer returns the caller's authorizer over org's view of snap. Answers are
// remembered only while the engine caches decisions: a policy calling a non-deterministic
// built-in (or a cache turned off) is asked every time.
func (m *Tools) authorizer(snap *catalog.Snapshot, ec identity.ExecContext) authorizer {
	v := m.view(snap, ec.Org)
	a := authorizer{m: m, ec: ec, view: v}
	if !m.d.Policy.CacheStats().Enabled {
		return a
	}
	caller, err := json.Marshal(gateway.PolicyInput(ec, "", ""))
	if err != nil {
		return a
	}
	key := m.d.Policy.Revision() + "\x00" + string(caller)
	if s, ok := v.authorized.Get(key, nil); ok {
		a.set = s
		return a
	}
	a.set = newAuthorizedSet(len(v.entries))
	v.authorized.Put(key, a.set)
	return a
}

// allows reports whether the caller is armed and authorized for e (an approval obligation
// still counts: the call can be made, it waits for a person).
func (a authorizer) allows(ctx context.Context, e *catalog.Entry) bool {
	if i, ok := a.view.index[e.Ref()]; ok && a.view.entries[i] == e {
		return a.allowsAt(ctx, i)
	}
	allowed, _ := a.decide(ctx, e)
	return allowed
}

// allowsAt is allows for the entry at position i of the view. A failed decision is a no,
// and is not remembered.
func (a authorizer) allowsAt(ctx context.Context, i int) bool {
	if a.set != nil {
		if allowed, known := a.set.get(i); known {
			return allowed
		}
	}
	allowed, decided := a.decide(ctx, a.view.entries[i])
	if a.set != nil && decided {
		a.set.set(i, allowed)
	}
	return allowed
}

// cut applies the policy's first cut (Decider.Searchable) once to the caller's set: the
// refs outside it are denied and the refs of its clean set allowed, without a decision; the
// others are decided one by one. A search, which may consider every entry, asks for it, and
// so does describe: the cut costs about what the caller's authorized set holds (~0.6 ms for
// 500 refs, ~4 ms for 5,000), a decision ~0.35 ms a ref. Plan decides its few refs directly.
// Without a first cut (its evaluation failed) every ref is decided.
func (a authorizer) cut(ctx context.Context) {
	if a.set == nil || !a.set.needsCut() {
		return
	}
	sets, err := a.m.d.Policy.Searchable(ctx, gateway.PolicyInput(a.ec, "", ""))
	if err != nil {
		return
	}
	// One look-up in the view's index a ref of the cut (a clean ref outside the cut is
	// denied anyway): at 100,000 entries each costs ~0.25 µs of cache misses.
	cut, clean := make([]int, 0, len(sets.Cut)), make([]int, 0, len(sets.Clean))
	for ref := range sets.Cut {
		if i, ok := a.view.index[ref]; ok {
			cut = append(cut, i)
			if sets.Clean[ref] {
				clean = append(clean, i)
			}
		}
	}
	a.set.applyCut(cut, clean)
}

// admitted lists the view's positions the caller may invoke, once all are decided; nil
// until then (or when nothing is remembered).
func (a authorizer) admitted() []int {
	if a.set == nil {
		return nil
	}
	return a.set.admitted()
}

// decide asks the policy; decided is false when it could not answer (then: not allowed).
func (a authorizer) decide(ctx context.Context, e *catalog.Entry) (allowed, decided bool) {
	d, err := a.m.d.Policy.Decide(ctx, gateway.PolicyInput(a.ec, e.Ref(), ""))
	if err != nil {
		return false, false
	}
	return d.Allow, true
}
