package outage

import (
	"errors"
	"testing"
	"time"
)

// TestTracker: a failure begins an outage that Recent reports for its dependency only, OK
// ends it (once), and a nil Tracker tracks nothing.
func TestTracker(t *testing.T) {
	tr := New()
	if d, ok := tr.Recent(time.Hour, AuditLog, RateLimiter); ok {
		t.Fatalf("no failure yet, Recent says %s", d)
	}
	tr.Failed(RateLimiter, errors.New("disk full"))
	tr.Failed(RateLimiter, errors.New("disk full"))
	if d, ok := tr.Recent(time.Hour, AuditLog, RateLimiter); !ok || d != RateLimiter {
		t.Fatalf("Recent %q %v, want %q", d, ok, RateLimiter)
	}
	if d, ok := tr.Recent(time.Hour, AuditLog, IdempotencyStore); ok {
		t.Fatalf("Recent names %s, which never failed", d)
	}
	if n := tr.active.Load(); n != 1 || tr.by[RateLimiter].failed != 2 {
		t.Fatalf("%d outages, %+v", n, tr.by[RateLimiter])
	}
	tr.OK(RateLimiter)
	tr.OK(RateLimiter)
	tr.OK(AuditLog)
	if n := tr.active.Load(); n != 0 || tr.by[RateLimiter] != nil {
		t.Fatalf("%d outages after OK", n)
	}
	if _, ok := tr.Recent(0, RateLimiter); ok {
		t.Fatal("a failure older than the window is recent")
	}
	var none *Tracker
	none.Failed(Policy, errors.New("x"))
	none.OK(Policy)
	if _, ok := none.Recent(time.Hour, Policy); ok {
		t.Fatal("a nil Tracker remembered a failure")
	}
}
