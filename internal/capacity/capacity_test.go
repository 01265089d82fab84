package capacity

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/xemahq/xema/internal/fault"
)

// isCode: err is the typed 503 of code, worth a retry.
func isCode(err error, code string) bool {
	var e *fault.Error
	return errors.As(err, &e) && e.Kind == fault.Unavailable && e.Code == code && e.RetryAfter >= 1
}

func TestProviderSlotsArePerProvider(t *testing.T) {
	p := NewProviderSlots(1)
	release, err := p.Acquire("a")
	if err != nil {
		t.Fatal("first slot of a refused")
	}
	if _, err := p.Acquire("a"); !isCode(err, CodeProviderBusy) {
		t.Fatalf("a second slot of a granted over its cap of 1: %v", err)
	}
	rb, err := p.Acquire("b")
	if err != nil {
		t.Fatal("b refused because a is busy")
	}
	release()
	if r, err := p.Acquire("a"); err != nil {
		t.Fatal("a's slot not given back")
	} else {
		r()
	}
	rb()
	if r, err := (*ProviderSlots)(nil).Acquire("x"); err != nil {
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
				r, err := s.Acquire()
				if err != nil {
					t.Fatal("a free slot was refused")
				}
				releases = append(releases, r)
			}
			if _, err := s.Acquire(); !isCode(err, CodeExceeded) {
				t.Fatalf("slot %d of %d granted: %v", n+1, n, err)
			}
			releases[0]()
			if r, err := s.Acquire(); err != nil {
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
	if _, err := none.Acquire(); err != nil || NewSlots(0) != nil {
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
			if _, err := s.Acquire(); err == nil { // never released
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
}
