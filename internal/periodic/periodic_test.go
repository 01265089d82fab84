package periodic

import (
	"context"
	"testing"
	"time"
)

// TestEvery: fn runs repeatedly, and Every returns once ctx ends.
func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ticks := make(chan time.Time, 16)
	done := make(chan struct{})
	go func() {
		Every(ctx, time.Millisecond, func(now time.Time) { ticks <- now })
		close(done)
	}()
	for range 3 {
		select {
		case <-ticks:
		case <-time.After(5 * time.Second):
			t.Fatal("fn not called")
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Every did not return after ctx ended")
	}
}
