package gateway

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// outages logs a dependency's outage once when it begins and once when it ends (with the
// number of calls it refused), instead of a line per failed call.
type outages struct {
	mu     sync.Mutex
	active atomic.Int32
	by     map[string]*outage
	last   map[string]time.Time // the latest failure of each dependency
}

type outage struct {
	since   time.Time
	failed  int64
	lastErr string
}

var deps = &outages{by: map[string]*outage{}, last: map[string]time.Time{}}

// fail counts a failure of what; the first of an outage is logged.
func (o *outages) fail(what string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	cur := o.by[what]
	if cur == nil {
		cur = &outage{since: time.Now()}
		o.by[what] = cur
		o.active.Add(1)
		slog.Error("dependency unavailable: outage begins; calls needing it are refused until it ends", "what", what, "err", err)
	}
	cur.failed++
	cur.lastErr = fmt.Sprint(err)
	o.last[what] = time.Now()
}

// RecentFailure names a dependency among whats that failed a call within the last d, if
// one did: readiness fails on it (a write probe can pass while real writes fail, e.g. SQLite
// reusing WAL space on a full disk).
func RecentFailure(d time.Duration, whats ...string) (string, bool) {
	deps.mu.Lock()
	defer deps.mu.Unlock()
	for _, w := range whats {
		if t, ok := deps.last[w]; ok && time.Since(t) < d {
			return w, true
		}
	}
	return "", false
}

// ok ends what's outage, if one is going on.
func (o *outages) ok(what string) {
	if o.active.Load() == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	cur := o.by[what]
	if cur == nil {
		return
	}
	delete(o.by, what)
	o.active.Add(-1)
	slog.Warn("dependency back: outage ended", "what", what, "duration", time.Since(cur.since).Round(time.Millisecond).String(),
		"failedCalls", cur.failed, "lastErr", cur.lastErr)
}

// DependencyFailed and DependencyOK let other packages (readiness, approvals) report to the
// same outage log.
func DependencyFailed(what string, err error) { deps.fail(what, err) }

// DependencyOK ends what's outage, if one is going on.
func DependencyOK(what string) { deps.ok(what) }
