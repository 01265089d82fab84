// Command load measures the whole funnel against a stock OPA in one run: it starts `xema serve`
// (SQLite, or the PostgreSQL of -store; demo biome granted) and `opa run --server` on the
// gateway's own bundle, then drives each with the same closed-loop generator (N workers, each
// sending its next request when the previous one is answered), bounded by a request count and
// a duration, loopback only.
//
//	go run ./test/load -xema bin/xema -opa OPA_BINARY -workers 8 -duration 15s [-store postgres://...]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xemahq/xema/internal/policy"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.xema, "xema", "bin/xema", "xema binary")
	flag.StringVar(&cfg.opa, "opa", "", "stock opa binary (built from the module version in go.mod)")
	flag.StringVar(&cfg.biomes, "biomes", "biomes", "biomes directory of the demo")
	flag.StringVar(&cfg.store, "store", "", "xema serve --store: empty for SQLite in a temporary directory, or postgres://... of an empty database")
	flag.IntVar(&cfg.workers, "workers", 8, "concurrent closed-loop workers")
	flag.IntVar(&cfg.count, "count", 200000, "at most this many requests per target")
	flag.DurationVar(&cfg.duration, "duration", 15*time.Second, "at most this long per target")
	flag.DurationVar(&cfg.warmup, "warmup", 2*time.Second, "unmeasured warm-up per target")
	flag.Parse()
	if err := run(context.Background(), cfg); err != nil {
		slog.Error("load", "err", err)
		os.Exit(1)
	}
}

type config struct {
	xema, opa, biomes, store string
	workers, count           int
	duration, warmup         time.Duration
}

// target is one endpoint and the body every request sends.
type target struct {
	name, url, token string
	body             []byte
	// ok checks an answer, so a fast error is never counted as a fast decision.
	ok func(status int, body []byte) bool
}

func run(ctx context.Context, cfg config) error {
	if cfg.opa == "" {
		return errors.New("-opa is required")
	}
	dir, err := os.MkdirTemp("", "xema-load-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	xemaAddr, err := freeAddr()
	if err != nil {
		return err
	}
	gw := exec.CommandContext(ctx, cfg.xema, "serve", "--addr", xemaAddr, "--data-dir", dir, "--store", cfg.store, "--bundle-reader", "user:alice")
	if err := start(gw, filepath.Join(dir, "xema.log")); err != nil {
		return err
	}
	defer stop(gw)
	gwURL := "http://" + xemaAddr
	if err := waitOK(gwURL + "/readyz"); err != nil {
		return fmt.Errorf("xema serve: %w", err)
	}
	agent, err := devToken(cfg.xema, dir, "--subject", "agent:support-bot", "--env", "project")
	if err != nil {
		return err
	}
	admin, err := devToken(cfg.xema, dir, "--subject", "user:alice", "--org-role", "org_admin", "--env", "org")
	if err != nil {
		return err
	}

	if err := grantDemo(gwURL, admin, filepath.Join(cfg.biomes, "demo")); err != nil {
		return err
	}

	// The stock OPA loads the bundle the gateway serves, so both decide on the same data.
	bundle := filepath.Join(dir, "xema.tar.gz")
	if err := fetch(gwURL+"/v1/bundles/xema.tar.gz", admin, bundle); err != nil {
		return err
	}
	opaAddr, err := freeAddr()
	if err != nil {
		return err
	}
	opa := exec.CommandContext(ctx, cfg.opa, "run", "--server", "--addr", opaAddr, "--bundle", bundle,
		"--log-level", "error", "--set", "decision_logs.console=false")
	if err := start(opa, filepath.Join(dir, "opa.log")); err != nil {
		return err
	}
	defer stop(opa)
	if err := waitOK("http://" + opaAddr + "/health?bundles"); err != nil {
		return fmt.Errorf("opa run: %w", err)
	}

	// The same decision: the input the gateway builds for this call (see gateway.policyInput).
	input := policy.Input{Ref: "kb:page.read@1", Subject: policy.Subject{Kind: "agent", Ref: "agent:support-bot"},
		Groups: []string{}, Roles: []string{}, Environment: "project", Resource: "welcome", Armed: []string{"*"}, Org: "default"}
	opaBody, _ := json.Marshal(map[string]any{"input": input})
	targets := []target{
		{name: "xema funnel: POST /v1/capabilities/invoke kb:page.read@1", url: gwURL + "/v1/capabilities/invoke", token: agent,
			body: []byte(`{"ref":"kb:page.read@1","input":{"pageId":"welcome"}}`),
			ok: func(status int, body []byte) bool {
				return status == http.StatusOK && bytes.Contains(body, []byte(`"auditId":"inv_`))
			}},
		{name: "stock opa run --server: POST /v1/data/xema/authz/decision", url: "http://" + opaAddr + "/v1/data/xema/authz/decision",
			body: opaBody,
			ok: func(status int, body []byte) bool {
				return status == http.StatusOK && bytes.Contains(body, []byte(`"allow":true`))
			}},
	}
	engine := "sqlite"
	if cfg.store != "" {
		engine = "postgres"
	}
	fmt.Printf("machine: %s/%s, %d CPUs, %s; store %s; workers %d, at most %d requests or %s per target (after %s warm-up)\n\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), engine, cfg.workers, cfg.count, cfg.duration, cfg.warmup)
	fmt.Println("| target | requests | errors | RPS | p50 | p99 |")
	fmt.Println("|---|---|---|---|---|---|")
	var results []result
	for _, tg := range targets {
		if _, err := drive(tg, cfg.workers, 1<<30, cfg.warmup); err != nil {
			return fmt.Errorf("%s warm-up: %w", tg.name, err)
		}
		r, err := drive(tg, cfg.workers, cfg.count, cfg.duration)
		if err != nil {
			return fmt.Errorf("%s: %w", tg.name, err)
		}
		results = append(results, r)
		fmt.Printf("| %s | %d | %d | %.0f | %s | %s |\n", tg.name, r.n, r.errors, r.rps(), r.pct(50), r.pct(99))
	}
	x, o := results[0], results[1]
	fmt.Printf("\nfunnel/opa: RPS %.2f×, p50 %.2f×, p99 %.2f×\n", x.rps()/o.rps(),
		float64(x.pct(50))/float64(o.pct(50)), float64(x.pct(99))/float64(o.pct(99)))
	return nil
}

// result is one measured run.
type result struct {
	n, errors int
	elapsed   time.Duration
	latencies []time.Duration // sorted
}

func (r result) rps() float64 { return float64(r.n) / r.elapsed.Seconds() }

func (r result) pct(p int) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	return r.latencies[min(len(r.latencies)-1, len(r.latencies)*p/100)].Round(time.Microsecond)
}

// drive runs the closed loop: each worker sends, waits for the answer, records, repeats,
// until count requests were claimed or d has passed. A wrong answer counts as an error.
func drive(tg target, workers, count int, d time.Duration) (result, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}, Timeout: 10 * time.Second}
	var claimed, errs atomic.Int64
	var firstErr atomic.Value
	per := make([][]time.Duration, workers)
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for claimed.Add(1) <= int64(count) && time.Now().Before(deadline) {
				t0 := time.Now()
				status, body, err := post(client, tg)
				lat := time.Since(t0)
				if err != nil || !tg.ok(status, body) {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("status %d err %v body %.200s", status, err, body))
					continue
				}
				per[w] = append(per[w], lat)
			}
		})
	}
	wg.Wait()
	r := result{elapsed: time.Since(start), errors: int(errs.Load())}
	for _, l := range per {
		r.latencies = append(r.latencies, l...)
	}
	slices.Sort(r.latencies)
	r.n = len(r.latencies)
	if r.n == 0 {
		return r, fmt.Errorf("no successful request; first error: %v", firstErr.Load())
	}
	if r.errors > 0 {
		return r, fmt.Errorf("%d failed requests; first: %v", r.errors, firstErr.Load())
	}
	return r, nil
}

func post(client *http.Client, tg target) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, tg.url, bytes.NewReader(tg.body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if tg.token != "" {
		req.Header.Set("Authorization", "Bearer "+tg.token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// grantDemo approves the demo biome through the API with limits no load run reaches, so the
// run measures the funnel, not the rate limiter's refusals.
func grantDemo(gwURL, admin, dir string) error {
	manifest, err := os.ReadFile(filepath.Join(dir, "biome.json"))
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "contributions", "*.capability.contribution.json"))
	if err != nil {
		return err
	}
	contribs := []json.RawMessage{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		contribs = append(contribs, raw)
	}
	var sub struct {
		BiomeID, Version string
		Digest           struct{ Hash string }
	}
	if err := call(gwURL+"/v1/biomes", admin, map[string]any{"manifest": json.RawMessage(manifest), "contributions": contribs}, &sub); err != nil {
		return fmt.Errorf("submit demo: %w", err)
	}
	limits := map[string]any{"rateLimit": map[string]any{"requests": 100000, "per": "1s"},
		"quota": map[string]any{"requests": 1000000000, "per": "24h"}}
	grant := map[string]any{"biomeId": sub.BiomeID, "version": sub.Version, "digestHash": sub.Digest.Hash,
		"customize": map[string]any{"kb:page.read@1": limits}}
	if err := call(gwURL+"/v1/grants", admin, grant, nil); err != nil {
		return fmt.Errorf("grant demo: %w", err)
	}
	return nil
}

// call POSTs body as JSON and expects 201.
func call(url, token string, body, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	status, answer, err := post(http.DefaultClient, target{url: url, token: token, body: raw})
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
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after 30s", url)
}

func devToken(bin, dataDir string, args ...string) (string, error) {
	out, err := exec.Command(bin, append([]string{"dev", "token", "--data-dir", dataDir}, args...)...).Output()
	if err != nil {
		return "", fmt.Errorf("xema dev token: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func fetch(url, token, path string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetch bundle: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch bundle: status %d", resp.StatusCode)
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("fetch bundle: %w", err)
	}
	return os.WriteFile(path, raw, 0o600)
}
