package gateway

import (
	"fmt"
	"net/http"

	"github.com/xemahq/xema/internal/inputschema"
)

// CodeCapacityExceeded answers a call refused because the gateway already runs as many
// outbound calls as it is configured for (xema serve --max-inflight-calls).
const CodeCapacityExceeded = "CAPACITY_EXCEEDED"

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

func capacityExceeded(n int) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeCapacityExceeded, RetryAfter: 1,
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
