package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/xemahq/xema/internal/connlimit"
)

// Listener is how Run serves the API.
type Listener struct {
	Addr    string
	Handler http.Handler
	// TLS serves HTTPS when set.
	TLS                            *tls.Config
	ReadHeaderTimeout, IdleTimeout time.Duration
	// MaxConns is the most client connections open at once; at the bound a new one closes the
	// connection idle longest (connlimit), and waits only while every one has a request in flight.
	MaxConns int
	// Shutdown is how long in-flight calls may finish once ctx ends before they are cut off.
	Shutdown time.Duration
	// MetricsAddr, when set, also serves Metrics there, without authentication.
	MetricsAddr string
	Metrics     http.Handler
	// Serving, when set, hears the bound address once the listener is open.
	Serving func(addr net.Addr)
}

// Run owns the process's life: it listens, starts the background loops, serves until ctx
// ends, drains the in-flight calls (cutting off, each with its outcome recorded, those still
// running after l.Shutdown) and closes the app, whatever happens. A listener that cannot
// open is an error before anything is served.
func (a *App) Run(ctx context.Context, l Listener) error {
	defer a.Close()
	ln, err := net.Listen("tcp", l.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", l.Addr, err)
	}
	var connState func(net.Conn, http.ConnState)
	if l.MaxConns > 0 {
		limited := connlimit.New(ln, l.MaxConns)
		ln, connState = limited, limited.ConnState
	}
	if l.MetricsAddr != "" {
		ms, err := serveMetrics(l)
		if err != nil {
			_ = ln.Close()
			return err
		}
		defer ms.Close()
	}
	a.runLoops() // Close (deferred above) stops them and waits for each before the store closes
	hs := &http.Server{Handler: l.Handler, ReadHeaderTimeout: l.ReadHeaderTimeout, IdleTimeout: l.IdleTimeout,
		MaxHeaderBytes: 64 << 10, TLSConfig: l.TLS, ConnState: connState}
	if l.Serving != nil {
		l.Serving(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() {
		if l.TLS != nil {
			errc <- hs.ServeTLS(ln, "", "")
			return
		}
		errc <- hs.Serve(ln)
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
	case <-ctx.Done():
		a.drain(hs, l.Shutdown)
	}
	return nil
}

// auditPruneEvery is how often --audit-retain prunes: a boundary that moved by ten minutes
// is a few thousand records at most for a busy gateway, a few batches.
const auditPruneEvery = 10 * time.Minute

// rollupEvery is how often the overview's rollups fold the new audit records: the records
// of the last pass's interval are what GET /v1/stats reads from the log itself.
const rollupEvery = 2 * time.Second

// runLoops starts the background work of a serving gateway, each loop until Close stops it;
// Close waits for every one before it closes what they use.
func (a *App) runLoops() {
	for _, loop := range []func(context.Context){
		func(ctx context.Context) { a.Watch(ctx, a.cfg.ReloadEvery) },
		func(ctx context.Context) { a.Policy.WatchExtra(ctx, a.cfg.PolicyDirPoll) },
		func(ctx context.Context) { a.PruneRateCounters(ctx, time.Minute) },
		func(ctx context.Context) { a.PruneAudit(ctx, auditPruneEvery) },
		func(ctx context.Context) { a.MaintainAuditPartitions(ctx, time.Hour) },
		func(ctx context.Context) { a.RollUpAudit(ctx, rollupEvery) },
		a.unauth.Run,
		func(ctx context.Context) { a.Federation.ResyncEvery(ctx, a.cfg.MCPResyncEvery) },
		a.Spool.Run,
		a.Notify.Run,
		func(ctx context.Context) { a.Maintain(ctx, 15*time.Second) },
	} {
		a.goLoop(loop)
	}
}

// goLoop runs loop until Close stops it; Close waits for it.
func (a *App) goLoop(loop func(context.Context)) {
	a.loops.Go(func() { loop(a.loopCtx) })
}

// stopAndWaitLoops ends the loops goLoop started and waits for each.
func (a *App) stopAndWaitLoops() {
	a.stopLoops()
	a.loops.Wait()
}

func serveMetrics(l Listener) (*http.Server, error) {
	ml, err := net.Listen("tcp", l.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", l.MetricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", l.Metrics)
	ms := &http.Server{Handler: mux, ReadHeaderTimeout: l.ReadHeaderTimeout, IdleTimeout: l.IdleTimeout}
	go func() { _ = ms.Serve(ml) }()
	slog.Info("metrics served without authentication on their own listener", "addr", ml.Addr().String())
	return ms, nil
}

// drain is the shutdown: stop accepting (and fail /readyz), let in-flight calls finish up to
// timeout, then cut off the ones still running (each records an INTERRUPTED_BY_SHUTDOWN
// outcome and answers it) and close the connections.
func (a *App) drain(hs *http.Server, timeout time.Duration) {
	a.Drain()
	slog.Info("shutting down: no new connections; draining in-flight calls", "inFlight", a.Gateway.InFlight(), "timeout", timeout.String())
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	err := hs.Shutdown(ctx)
	cancel()
	if err == nil {
		slog.Info("drained: every in-flight call finished", "took", time.Since(start).Round(time.Millisecond).String())
		return
	}
	slog.Warn("shutdown deadline reached: cutting off the calls still running, each with its outcome recorded",
		"inFlight", a.Gateway.InFlight())
	a.Gateway.AbortRuns()
	grace, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Gateway.WaitRuns(grace); err != nil {
		slog.Error("calls still running after the cut-off; their outcome stays unknown", "inFlight", a.Gateway.InFlight())
	}
	_ = hs.Shutdown(grace) // the cut-off calls write their answers
	_ = hs.Close()
}
