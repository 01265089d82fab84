package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/xemahq/xema/internal/policy"
)

// noopRef is the capability the funnel targets: an http runner on the harness's no-op provider.
const noopRef = "bench:noop.read@1"

// providerConns counts the connections the no-op provider has accepted: a client in front of
// it that does not keep its connections (its idle pool smaller than its concurrency) opens
// one a call.
var providerConns atomic.Int64

// noop is the no-op provider: it answers every POST with a constant JSON object.
type noop struct {
	URL string
	srv *http.Server
}

func startNoop() (*noop, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("no-op provider: %w", err)
	}
	answer := []byte(`{"ok":true}`)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			providerConns.Add(1)
		}
	}, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	})}
	go func() { _ = srv.Serve(ln) }()
	return &noop{URL: "http://" + ln.Addr().String() + "/noop", srv: srv}, nil
}

func (n *noop) Close() { _ = n.srv.Close() }

// gateway is a running xema serve.
type gateway struct {
	cmd          *exec.Cmd
	url          string
	bin, dataDir string
	agent, admin string // tokens
	pprof        string // --pprof address, "" when off
}

func startGateway(bin, dir, dsn string, pprof bool) (*gateway, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	g := &gateway{url: "http://" + addr, bin: bin, dataDir: dir}
	args := []string{"serve", "--addr", addr, "--data-dir", dir, "--store", dsn, "--bundle-reader", "user:alice", "--metrics-reader", "user:alice"}
	if pprof {
		if g.pprof, err = freeAddr(); err != nil {
			return nil, err
		}
		args = append(args, "--pprof", g.pprof)
	}
	g.cmd = exec.Command(bin, args...)
	if err := start(g.cmd, filepath.Join(dir, "xema.log")); err != nil {
		return nil, err
	}
	if err := waitOK(g.url + "/readyz"); err != nil {
		g.stop()
		return nil, fmt.Errorf("xema serve: %w", err)
	}
	if g.agent, err = g.token("--subject", "agent:support-bot", "--env", "project"); err != nil {
		g.stop()
		return nil, err
	}
	if g.admin, err = g.token("--subject", "user:alice", "--org-role", "org_admin", "--env", "org"); err != nil {
		g.stop()
		return nil, err
	}
	return g, nil
}

func (g *gateway) pid() int { return g.cmd.Process.Pid }

func (g *gateway) stop() { stop(g.cmd) }

func (g *gateway) token(args ...string) (string, error) {
	out, err := exec.Command(g.bin, append([]string{"dev", "token", "--data-dir", g.dataDir}, args...)...).Output()
	if err != nil {
		return "", fmt.Errorf("xema dev token: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// counters are the gateway's /metrics series the report uses (zero where the gateway does
// not export them).
type counters struct {
	hits, misses          float64 // decision cache lookups
	batches, batchRecords float64 // audit write batches and the records they carried
	batchSeconds          float64 // the time the audit writer spent in those batches
	allocBytes, gcCycles  float64 // the Go heap's allocations and the collector's cycles
}

func (c counters) minus(o counters) counters {
	return counters{c.hits - o.hits, c.misses - o.misses, c.batches - o.batches, c.batchRecords - o.batchRecords,
		c.batchSeconds - o.batchSeconds, c.allocBytes - o.allocBytes, c.gcCycles - o.gcCycles}
}

// scrape reads the counters from /metrics.
func (g *gateway) scrape() (counters, error) {
	var c counters
	req, err := http.NewRequest(http.MethodGet, g.url+"/metrics", nil)
	if err != nil {
		return c, err
	}
	req.Header.Set("Authorization", "Bearer "+g.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return c, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c, fmt.Errorf("metrics: status %d", resp.StatusCode)
	}
	series := map[string]*float64{
		`xema_cache_requests_total{cache="decision",result="hit"}`:  &c.hits,
		`xema_cache_requests_total{cache="decision",result="miss"}`: &c.misses,
		`xema_audit_batch_size_count`:                               &c.batches,
		`xema_audit_batch_size_sum`:                                 &c.batchRecords,
		`xema_audit_batch_duration_seconds_sum{result="ok"}`:        &c.batchSeconds,
		`go_memstats_alloc_bytes_total`:                             &c.allocBytes,
		`go_gc_duration_seconds_count`:                              &c.gcCycles,
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if dst := series[name]; ok && dst != nil {
			if *dst, err = strconv.ParseFloat(value, 64); err != nil {
				return c, fmt.Errorf("metrics: %s: %w", name, err)
			}
		}
	}
	return c, sc.Err()
}

// profile writes a CPU profile of the next d (less a margin, so it ends within the
// window) to path, and the heap allocations of the same span to path's .allocs.prof
// sibling; the channel answers when both are written.
func (g *gateway) profile(path string, d time.Duration) <-chan error {
	done := make(chan error, 1)
	seconds := max(1, int((d-500*time.Millisecond)/time.Second))
	allocs := make(chan error, 1)
	go func() {
		allocs <- fetch(fmt.Sprintf("http://%s/debug/pprof/allocs?seconds=%d", g.pprof, seconds), "", allocsPath(path))
	}()
	go func() {
		err := fetch(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", g.pprof, seconds), "", path)
		done <- errors.Join(err, <-allocs)
	}()
	return done
}

// allocsPath is where the allocation profile of the CPU profile at path goes.
func allocsPath(path string) string { return strings.TrimSuffix(path, ".prof") + ".allocs.prof" }

// installNoop submits a biome of the no-op capability and grants it to every subject of
// the org, with limits no run reaches: every call is counted, none refused.
func installNoop(g *gateway, providerURL string) error {
	manifest := map[string]any{"id": "bench", "version": "1.0.0", "requiresCapabilities": []string{noopRef},
		"permissionHints": []map[string]string{{"capability": noopRef, "reason": "The load harness's no-op provider."}},
		"defaultProfile":  "internal-agent"}
	item := map[string]any{"type": "string", "pattern": "^[a-z0-9-]{1,64}$", "x-xema-resource": true, "x-xema-resourceType": "bench_item"}
	contribution := map[string]any{"kind": "capability",
		"manifest": map[string]any{"ref": noopRef, "title": "No-op read", "summary": "Answers a constant object: what the funnel costs over its provider.",
			"sideEffects": "None: read only.", "riskTier": "low", "requiresApproval": false, "effectClass": "read", "reach": "integration",
			"outputClassification": "internal", "authorityEffect": "none", "safeForAgents": true,
			"inputSchema":  map[string]any{"type": "object", "required": []string{"item"}, "properties": map[string]any{"item": item}},
			"outputSchema": map[string]any{"type": "object", "x-xema-resourceType": "bench_result", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}},
		"invocation": map[string]any{"kind": "http", "url": providerURL, "timeoutMs": 5000}}
	var sub struct {
		BiomeID, Version string
		Digest           struct{ Hash string }
	}
	if err := call(g.url+"/v1/biomes", g.admin, map[string]any{"manifest": manifest, "contributions": []any{contribution}}, &sub); err != nil {
		return fmt.Errorf("submit the no-op biome: %w", err)
	}
	limits := map[string]any{"rateLimit": map[string]any{"requests": 100000, "per": "1s"},
		"quota": map[string]any{"requests": 1000000000, "per": "24h"}}
	grant := map[string]any{"biomeId": sub.BiomeID, "version": sub.Version, "digestHash": sub.Digest.Hash,
		"customize": map[string]any{noopRef: limits}}
	if err := call(g.url+"/v1/grants", g.admin, grant, nil); err != nil {
		return fmt.Errorf("grant the no-op biome: %w", err)
	}
	return nil
}

// opaServer is a running stock opa run --server.
type opaServer struct {
	cmd *exec.Cmd
	url string
}

func (o *opaServer) stop() { stop(o.cmd) }

// startOPA starts the stock OPA on the bundle the gateway serves, so both decide on the
// same data.
func startOPA(bin, dir string, g *gateway) (*opaServer, error) {
	bundle := filepath.Join(dir, "xema.tar.gz")
	if err := fetch(g.url+"/v1/bundles/xema.tar.gz", g.admin, bundle); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	o := &opaServer{url: "http://" + addr, cmd: exec.Command(bin, "run", "--server", "--addr", addr, "--bundle", bundle,
		"--log-level", "error", "--set", "decision_logs.console=false")}
	if err := start(o.cmd, filepath.Join(dir, "opa.log")); err != nil {
		return nil, err
	}
	if err := waitOK(o.url + "/health?bundles"); err != nil {
		o.stop()
		return nil, fmt.Errorf("opa run: %w", err)
	}
	return o, nil
}

func directTarget(url string) target {
	body := []byte(`{"item":"a"}`)
	return target{name: "direct no-op provider", kind: "direct", url: url,
		body: func(int64) []byte { return body },
		ok: func(status int, b []byte) bool {
			return status == http.StatusOK && bytes.Equal(b, []byte(`{"ok":true}`))
		}}
}

// funnelTarget invokes the no-op capability; distinct gives every call its own resource,
// so no decision is a cache hit.
func funnelTarget(g *gateway, name string, distinct bool) target {
	same := []byte(`{"ref":"` + noopRef + `","input":{"item":"a"}}`)
	tg := target{name: name, kind: "funnel", url: g.url + "/v1/capabilities/invoke", token: g.agent, gateway: true, pid: g.pid(),
		body: func(int64) []byte { return same },
		ok: func(status int, b []byte) bool {
			return status == http.StatusOK && bytes.Contains(b, []byte(`"auditId":"inv_`))
		}}
	if distinct {
		tg.kind = "funnel-miss"
		tg.body = func(n int64) []byte { return fmt.Appendf(nil, `{"ref":"%s","input":{"item":"r%d"}}`, noopRef, n) }
	}
	return tg
}

// opaTarget asks the stock OPA the decision the gateway makes for the cached call: the
// input the gateway builds for it (see gateway.policyInput).
func opaTarget(url string) target {
	input := policy.Input{Ref: noopRef, Subject: policy.Subject{Kind: "agent", Ref: "agent:support-bot"},
		Groups: []string{}, Roles: []string{}, Environment: "project", Resource: "a", Armed: []string{"*"}, Org: "default"}
	body, _ := json.Marshal(map[string]any{"input": input}) // a struct of strings always encodes
	return target{name: "stock opa run --server: POST /v1/data/xema/authz/decision", kind: "opa",
		url: url + "/v1/data/xema/authz/decision", body: func(int64) []byte { return body },
		ok: func(status int, b []byte) bool {
			return status == http.StatusOK && bytes.Contains(b, []byte(`"allow":true`))
		}}
}

// call POSTs body as JSON and expects 201.
func call(url, token string, body, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	status, answer, err := post(http.DefaultClient, url, token, raw)
	if err != nil {
		return err
	}
	if status != http.StatusCreated {
		return fmt.Errorf("status %d: %.300s", status, answer)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(answer, out)
}

// freeAddr is a free loopback address.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func start(cmd *exec.Cmd, logFile string) error {
	f, err := os.Create(logFile)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return nil
}

func stop(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func waitOK(url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond) // polling a process started outside: no signal to wait on
	}
	return fmt.Errorf("%s not ready after 30s", url)
}

// fetch GETs url (with token, when not empty) into path.
func fetch(url, token, path string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch %s: status %d", url, resp.StatusCode)
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", url, err)
	}
	return os.WriteFile(path, raw, 0o600)
}
