package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// target is one endpoint and what every request sends.
type target struct {
	name, kind, url, token string
	// body is the request body of call n (n counts every call of the run, warm-up included).
	body func(n int64) []byte
	// ok checks an answer, so a fast error is never counted as a fast decision.
	ok func(status int, body []byte) bool
	// gateway: the target is served by xema serve, whose metrics (and profile) are read.
	gateway bool
	// pid, when not 0, is the process serving the target, whose CPU time is measured.
	pid int
}

// result is one measured run.
type result struct {
	n, errors int
	elapsed   time.Duration
	latencies []time.Duration // sorted
	// Of the serving process over the window (targets with a pid).
	cpu time.Duration
	// machine is the whole machine's CPU over the window (/proc/stat).
	machine machineCPU
	// conns is the connections the no-op provider accepted over the window.
	conns int64
	// self is the harness's own CPU time over the window: its clients and the provider.
	self    time.Duration
	metrics counters
	// io is the gateway's writes over the window (gateway targets).
	io ioCounts
	// breakdown is the markdown of where the gateway's CPU went, from the window's profile,
	// and parts the µs a call of each of its parts.
	breakdown []string
	parts     []float64
}

func (r result) rps() float64 { return float64(r.n) / r.elapsed.Seconds() }

func (r result) pct(p int) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	return r.latencies[min(len(r.latencies)-1, len(r.latencies)*p/100)].Round(time.Microsecond)
}

func (r result) cpuPerCall() string {
	if r.cpu == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f µs", float64(r.cpu.Microseconds())/float64(r.n))
}

// writes is the gateway's write syscalls and bytes a call.
func (r result) writes() string {
	if r.io.writes == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f, %.1f KB", float64(r.io.writes)/float64(r.n), float64(r.io.bytes)/float64(r.n)/1000)
}

// writerAndPolicy is, from the window's profile if one was taken, what the audit writer
// and the policy decision cost a call.
func (r result) writerAndPolicy() string {
	if len(r.parts) < 2 {
		return ""
	}
	return fmt.Sprintf(", audit writer %.0f µs and policy %.0f µs a call (profile)", r.parts[0], r.parts[1])
}

func (r result) hitRate() string {
	m := r.metrics
	if m.hits+m.misses == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f %%", 100*m.hits/(m.hits+m.misses))
}

func (r result) perBatch() string {
	m := r.metrics
	if m.batches == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f (%.2f a call)", m.batchRecords/m.batches, m.batches/float64(r.n))
}

// allocated is what the gateway's Go heap allocated a call, and its garbage collector's
// cycles over the window: the collector's work grows with the bytes.
func (r result) allocated() string {
	m := r.metrics
	if m.allocBytes == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f KB (%.0f GC cycles)", m.allocBytes/float64(r.n)/1000, m.gcCycles)
}

// writerBusy is the share of the window the audit writer spent committing batches, and a
// batch's mean time: a writer near 100 % is the funnel's serial bottleneck.
func (r result) writerBusy() string {
	m := r.metrics
	if m.batches == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f %% (%.2f ms a batch)", 100*m.batchSeconds/r.elapsed.Seconds(), 1000*m.batchSeconds/m.batches)
}

// calls numbers the requests of the whole run, so a cache-defeating body is never repeated.
var calls atomic.Int64

// drive runs the closed loop: each worker sends, waits for the answer, records, repeats,
// until count requests were claimed or d has passed. A wrong answer counts as an error.
func drive(tg target, workers, count int, d time.Duration) (result, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
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
				status, body, err := post(client, tg.url, tg.token, tg.body(calls.Add(1)))
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

func post(client *http.Client, url, token string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}
