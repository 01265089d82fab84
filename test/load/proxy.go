package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// The bare proxy is the two HTTP hops of a funnel call with nothing else: a process of its
// own that reads each POST, sends its body to the no-op provider over a pooled client and
// copies the answer back. It is what the issue calls the physical limit of a gateway in
// the middle, measured on the same machine in the same run, so the funnel's own cost is the
// difference between the two rows, not between the funnel and one hop.

// proxyMode is the hidden flag that makes the harness's binary the bare proxy: its value is
// "LISTEN_ADDR UPSTREAM_URL".
const proxyMode = "bare-proxy"

// serveProxy runs the bare proxy until the process is stopped.
func serveProxy(addr, upstream string) error {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("bare proxy: %w", err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := client.Post(upstream, "application/json", bytes.NewReader(body))
		if err != nil {
			http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			http.Error(w, "upstream body: "+err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(out)
	})}
	return srv.Serve(ln)
}

// proxyProc is a running bare proxy.
type proxyProc struct {
	cmd *exec.Cmd
	url string
}

// startProxy starts this binary again as the bare proxy in front of upstream.
func startProxy(dir, upstream string) (*proxyProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bare proxy: %w", err)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p := &proxyProc{cmd: exec.Command(self, "-"+proxyMode, addr+" "+upstream), url: "http://" + addr + "/"}
	if err := start(p.cmd, filepath.Join(dir, "proxy.log")); err != nil {
		return nil, err
	}
	if err := waitOK(p.url); err != nil {
		p.stop()
		return nil, fmt.Errorf("bare proxy: %w", err)
	}
	return p, nil
}

func (p *proxyProc) stop() { stop(p.cmd) }

// proxyTarget is the direct target's call through the bare proxy.
func proxyTarget(p *proxyProc) target {
	tg := directTarget(p.url)
	tg.name, tg.kind, tg.pid = "bare proxy (two hops, no funnel, its own process)", "proxy", p.cmd.Process.Pid
	return tg
}
