package gateway

import (
	"context"
	"sync"
)

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
