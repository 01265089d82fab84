package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/spf13/pflag"
)

// pprofAddr is `xema serve --pprof ADDR`: off (empty) by default.
var pprofAddr string

func addPprofFlag(f *pflag.FlagSet) {
	f.StringVar(&pprofAddr, "pprof", "", "serve Go's net/http/pprof profiles on this separate HOST:PORT (e.g. 127.0.0.1:6060); off by default, never on the gateway's own address; unauthenticated, so keep it on loopback")
}

// startPprof serves /debug/pprof/ on pprofAddr until ctx ends; nothing when it is empty.
// It has its own listener and mux: no profile is ever reachable through the gateway.
func startPprof(ctx context.Context) error {
	if pprofAddr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(pprofAddr)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--pprof %q: want HOST:PORT", pprofAddr)}
	}
	ln, err := net.Listen("tcp", pprofAddr)
	if err != nil {
		return fmt.Errorf("--pprof: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		slog.Warn("--pprof listens beyond loopback: profiles are unauthenticated", "addr", ln.Addr().String())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("pprof server stopped", "error", err)
		}
	}()
	if ctx != nil {
		context.AfterFunc(ctx, func() { _ = srv.Close() })
	}
	slog.Info("pprof profiles served", "addr", "http://"+ln.Addr().String()+"/debug/pprof/")
	return nil
}
