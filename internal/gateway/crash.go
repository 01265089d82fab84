package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xemahq/xema/internal/fault"
)

// Answer codes of a call that ran (or may have run) but whose ending is not what it asked.
const (
	// CodeOutcomeNotRecorded: the runner ran; its outcome record could not be written. The
	// outcome is spooled and written once the store is back; the decision record's auditId
	// is in the answer. Never a denial: retrying without an Idempotency-Key may run the call
	// again.
	CodeOutcomeNotRecorded = "OUTCOME_NOT_RECORDED"
	// CodeInterrupted: the gateway shut down (its --shutdown-timeout passed) while the call
	// ran; it may have reached its provider. Its outcome is recorded as interrupted.
	CodeInterrupted = "INTERRUPTED_BY_SHUTDOWN"
	// OutcomeAdmitted is the outcome of a decision record: admitted to run, the outcome
	// record (audit.OutcomeID) tells how it ended. A decision record without an outcome
	// record is a call whose ending is unknown (the gateway stopped), never one known to
	// have been dispatched.
	OutcomeAdmitted = "admitted"
	// OutcomeNotDispatched closes a decision record whose call never reached its runner.
	OutcomeNotDispatched = "not-dispatched"
)

// outcomeNotRecorded answers a call that ran when its outcome record failed.
func outcomeNotRecorded(auditID, outcome string, spooled bool) *fault.Error {
	where := "kept in memory and written once the store is back (lost if the gateway stops first)"
	if spooled {
		where = "spooled to disk and written once the store is back"
	}
	return &fault.Error{Kind: fault.Internal, Code: CodeOutcomeNotRecorded, AuditID: auditID, Outcome: outcome,
		Message: fmt.Sprintf("the call ran (its runner ended %q) but its outcome could not be recorded; the outcome is %s. "+
			"This is not a denial: retry only with the same Idempotency-Key", outcome, where)}
}

// ranUnrecorded says err answers a call that ran to its end (outcome ok) whose outcome record
// failed: its output is still the caller's.
func ranUnrecorded(err error) bool {
	var e *fault.Error
	return errors.As(err, &e) && e.Code == CodeOutcomeNotRecorded && e.Outcome == "ok"
}

func interrupted(auditID string) *fault.Error {
	return &fault.Error{Kind: fault.Unavailable, Code: CodeInterrupted, AuditID: auditID, Outcome: CodeInterrupted,
		Message: "the gateway shut down while the call ran; it may have reached its provider (its outcome is recorded as interrupted)"}
}

// runs tracks the calls between their decision record and their outcome, so a shutdown can
// wait for them and, at its deadline, cut them off with an outcome recorded.
type runs struct {
	once   sync.Once
	ctx    context.Context // cancelled by AbortRuns
	cancel context.CancelFunc
	mu     sync.Mutex
	n      int64
	idle   chan struct{} // closed when n drops to 0; nil while n is 0
}

func (r *runs) add() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 {
		r.idle = make(chan struct{})
	}
	r.n++
}

func (r *runs) done() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n--
	if r.n == 0 {
		close(r.idle)
		r.idle = nil
	}
}

func (g *Gateway) runs() *runs {
	g.inflight.once.Do(func() { g.inflight.ctx, g.inflight.cancel = context.WithCancel(context.Background()) })
	return &g.inflight
}

// InFlight is the number of calls running now (decision recorded, outcome not yet).
func (g *Gateway) InFlight() int64 {
	r := g.runs()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// AbortRuns cancels every running call: each ends with the outcome INTERRUPTED_BY_SHUTDOWN
// recorded and answered. Calls starting later are aborted at once.
func (g *Gateway) AbortRuns() { g.runs().cancel() }

// WaitRuns waits until no call runs, or ctx ends.
func (g *Gateway) WaitRuns(ctx context.Context) error {
	r := g.runs()
	r.mu.Lock()
	idle := r.idle
	r.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return g.WaitRuns(ctx) // calls may have started meanwhile

	case <-ctx.Done():
		return ctx.Err()
	}
}

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
