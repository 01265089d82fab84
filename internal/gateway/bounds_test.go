package gateway

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/inputschema"
)

func TestProviderSlotsArePerProvider(t *testing.T) {
	p := NewProviderSlots(1)
	release, ok := p.Acquire("a")
	if !ok {
		t.Fatal("first slot of a refused")
	}
	if _, ok := p.Acquire("a"); ok {
		t.Fatal("a second slot of a granted over its cap of 1")
	}
	rb, ok := p.Acquire("b")
	if !ok {
		t.Fatal("b refused because a is busy")
	}
	release()
	if r, ok := p.Acquire("a"); !ok {
		t.Fatal("a's slot not given back")
	} else {
		r()
	}
	rb()
	if r, ok := (*ProviderSlots)(nil).Acquire("x"); !ok {
		t.Fatal("no bound refused")
	} else {
		r()
	}
}

func TestSlotsNeverWait(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			s := NewSlots(n)
			var releases []func()
			for range n {
				r, ok := s.Acquire()
				if !ok {
					t.Fatal("a free slot was refused")
				}
				releases = append(releases, r)
			}
			if _, ok := s.Acquire(); ok {
				t.Fatalf("slot %d of %d granted", n+1, n)
			}
			releases[0]()
			if r, ok := s.Acquire(); !ok {
				t.Fatal("a released slot was refused")
			} else {
				r()
			}
			if s.InUse() != n-1 || s.Cap() != n {
				t.Fatalf("InUse %d Cap %d", s.InUse(), s.Cap())
			}
		})
	}
	var none *Slots
	if _, ok := none.Acquire(); !ok || NewSlots(0) != nil {
		t.Fatal("no bound must grant every call")
	}
	// Concurrent takers never get more than n.
	s := NewSlots(4)
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, ok := s.Acquire(); ok { // never released
				mu.Lock()
				granted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if granted != 4 {
		t.Fatalf("granted %d of 4 slots", granted)
	}
	if e := capacityExceeded(4); e.Kind != fault.Unavailable || e.Code != CodeCapacityExceeded || e.RetryAfter < 1 {
		t.Fatalf("capacity answer %+v", e)
	}
}

func TestViolationsAreCapped(t *testing.T) {
	many := func(n int) []inputschema.Violation {
		vs := make([]inputschema.Violation, n)
		for i := range vs {
			vs[i] = inputschema.Violation{Path: fmt.Sprintf("/p%d", i), Message: "unknown property"}
		}
		return vs
	}
	for _, tc := range []struct {
		name  string
		err   *fault.Error
		total int
	}{
		{"invalid input, 90000", invalidInput(many(90_000)), 90_000},
		{"invalid input, 3", invalidInput(many(3)), 3},
		{"handler client error, 250", providerError(&fault.Error{Kind: fault.Invalid, Code: "X", Violations: many(250)}), 250},
		{"exactly the maximum", providerError(&fault.Error{Kind: fault.Invalid, Code: "X", Violations: many(MaxViolations)}), MaxViolations},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(tc.err)
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Violations     []inputschema.Violation `json:"violations"`
				ViolationCount int                     `json:"violationCount"`
			}
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatal(err)
			}
			if want := min(tc.total, MaxViolations); len(body.Violations) != want || body.ViolationCount != tc.total {
				t.Fatalf("violations %d count %d, want %d and %d", len(body.Violations), body.ViolationCount, want, tc.total)
			}
		})
	}
}
