// Package capacity bounds the outbound calls the gateway runs at once, in total and per
// provider, without ever waiting: a call takes a slot now or is refused with a typed 503, so a
// flood of slow providers cannot pile up goroutines behind it.
package capacity

import (
	"sync"

	"github.com/xemahq/xema/internal/fault"
)

// Answer codes of a call refused for capacity (both 503, Retry-After 1).
const (
	// CodeExceeded: the gateway already runs as many outbound calls as it is configured for
	// (xema serve --max-inflight-calls).
	CodeExceeded = "CAPACITY_EXCEEDED"
	// CodeProviderBusy: the call's provider already has as many calls in flight as one
	// provider may (xema serve --max-inflight-per-provider).
	CodeProviderBusy = "PROVIDER_BUSY"
)

// Slots is a counting semaphore that never waits.
type Slots struct{ ch chan struct{} }

// NewSlots returns n slots; n <= 0 returns nil (no bound).
func NewSlots(n int) *Slots {
	if n <= 0 {
		return nil
	}
	return &Slots{ch: make(chan struct{}, n)}
}

// Acquire takes a slot if one is free; release gives it back (exactly once). A nil Slots
// always succeeds; a refusal is the typed CAPACITY_EXCEEDED.
func (s *Slots) Acquire() (release func(), err error) {
	if s == nil {
		return func() {}, nil
	}
	if !s.take() {
		return nil, busy(CodeExceeded, "the gateway is running its maximum of %d outbound calls; retry shortly", cap(s.ch))
	}
	return func() { <-s.ch }, nil
}

func (s *Slots) take() bool {
	select {
	case s.ch <- struct{}{}:
		return true
	default:
		return false
	}
}

// Cap is the number of slots (0 for nil).
func (s *Slots) Cap() int {
	if s == nil {
		return 0
	}
	return cap(s.ch)
}

// InUse is the number of slots taken.
func (s *Slots) InUse() int {
	if s == nil {
		return 0
	}
	return len(s.ch)
}

// ProviderSlots bounds the calls in flight per provider (the biome or MCP server serving a
// ref), so one slow provider cannot take every outbound slot from the others.
type ProviderSlots struct {
	n  int
	mu sync.Mutex
	by map[string]*Slots
}

// NewProviderSlots returns n slots per provider; n <= 0 returns nil (no bound).
func NewProviderSlots(n int) *ProviderSlots {
	if n <= 0 {
		return nil
	}
	return &ProviderSlots{n: n, by: map[string]*Slots{}}
}

// Acquire takes one of provider's slots if one is free. A nil ProviderSlots always
// succeeds; a refusal is the typed PROVIDER_BUSY.
func (p *ProviderSlots) Acquire(provider string) (release func(), err error) {
	if p == nil {
		return func() {}, nil
	}
	p.mu.Lock()
	s, found := p.by[provider]
	if !found {
		s = NewSlots(p.n)
		p.by[provider] = s // one entry per biome or MCP server of the catalog: bounded by it
	}
	p.mu.Unlock()
	if !s.take() {
		return nil, busy(CodeProviderBusy, "provider %s already has its maximum of %d calls in flight; retry shortly", provider, p.n)
	}
	return func() { <-s.ch }, nil
}

// busy is a refusal for capacity: unavailable now, worth a retry in a second.
func busy(code, format string, args ...any) *fault.Error {
	e := fault.New(fault.Unavailable, code, format, args...)
	e.RetryAfter = 1
	return e
}
