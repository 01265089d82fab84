package gateway

import (
	"fmt"
	"sync"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/inputschema"
)

// CodeCapacityExceeded answers a call refused because the gateway already runs as many
// outbound calls as it is configured for (xema serve --max-inflight-calls).
const CodeCapacityExceeded = "CAPACITY_EXCEEDED"

// CodeProviderBusy answers a call refused because its provider already has as many calls in
// flight as one provider may (xema serve --max-inflight-per-provider).
const CodeProviderBusy = "PROVIDER_BUSY"

// MaxViolations is the most violations one answer lists; ViolationCount carries the total.
const MaxViolations = 100

// Slots is a counting semaphore that never waits: a call either takes a slot now or is
// refused, so a flood of slow providers cannot pile up goroutines behind it.
type Slots struct{ ch chan struct{} }

// NewSlots returns n slots; n <= 0 returns nil (no bound).
func NewSlots(n int) *Slots {
	if n <= 0 {
		return nil
	}
	return &Slots{ch: make(chan struct{}, n)}
}

// Acquire takes a slot if one is free; release gives it back (exactly once). A nil Slots
// always succeeds.
func (s *Slots) Acquire() (release func(), ok bool) {
	if s == nil {
		return func() {}, true
	}
	select {
	case s.ch <- struct{}{}:
		return func() { <-s.ch }, true
	default:
		return nil, false
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

// Acquire takes one of provider's slots if one is free. A nil ProviderSlots always succeeds.
func (p *ProviderSlots) Acquire(provider string) (release func(), ok bool) {
	if p == nil {
		return func() {}, true
	}
	p.mu.Lock()
	s, found := p.by[provider]
	if !found {
		s = NewSlots(p.n)
		p.by[provider] = s // one entry per biome or MCP server of the catalog: bounded by it
	}
	p.mu.Unlock()
	return s.Acquire()
}

func providerBusy(provider string, n int) *fault.Error {
	return &fault.Error{Kind: fault.Unavailable, Code: CodeProviderBusy, RetryAfter: 1,
		Message: fmt.Sprintf("provider %s already has its maximum of %d calls in flight; retry shortly", provider, n)}
}

func capacityExceeded(n int) *fault.Error {
	return &fault.Error{Kind: fault.Unavailable, Code: CodeCapacityExceeded, RetryAfter: 1,
		Message: fmt.Sprintf("the gateway is running its maximum of %d outbound calls; retry shortly", n)}
}

// capViolations bounds the violations an answer carries; the total is returned for
// ViolationCount. The producers (schema validation, handlers) may find many more (one per
// unknown property of a 1 MiB body); the answer stays small.
func capViolations(vs []inputschema.Violation) ([]inputschema.Violation, int) {
	if len(vs) > MaxViolations {
		return vs[:MaxViolations:MaxViolations], len(vs)
	}
	return vs, len(vs)
}
