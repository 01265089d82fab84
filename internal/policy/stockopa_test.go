package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/policy/opatest"
	"github.com/xemahq/xema/internal/testnet"
)

// bundleServer serves e.Bundle() as the gateway does, honouring If-None-Match.
type bundleServer struct {
	e           *Engine
	notModified atomic.Int32
}

func (s *bundleServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/bundles/xema.tar.gz" {
		http.NotFound(w, r)
		return
	}
	tarGz, etag := s.e.Bundle()
	if tarGz == nil {
		http.Error(w, "no bundle", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("ETag", etag)
	if r.Header.Get("If-None-Match") == etag {
		s.notModified.Add(1)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/gzip")
	_, _ = w.Write(tarGz)
}

// TestStockOPAAgrees runs a stock `opa run --server` against the bundle this package serves
// and checks that its decisions equal Engine.Decide on every case of the table.
func TestStockOPAAgrees(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the opa binary")
	}
	bin := opatest.Binary(t)
	e := loadedEngine(t)
	bs := &bundleServer{e: e}
	srv := httptest.NewServer(bs)
	t.Cleanup(srv.Close)

	addr := fmt.Sprintf("127.0.0.1:%d", testnet.FreePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	logs := &testnet.Output{}
	cmd := exec.CommandContext(ctx, bin, "run", "--server", "--addr", addr,
		"--set", "services.xema.url="+srv.URL,
		"--set", "bundles.xema.service=xema",
		"--set", "bundles.xema.resource=/v1/bundles/xema.tar.gz",
		"--set", "bundles.xema.polling.min_delay_seconds=1",
		"--set", "bundles.xema.polling.max_delay_seconds=1",
		"--set", "decision_logs.console=false")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	base := "http://" + addr
	waitFor(t, logs, "bundle r1 active", func() bool { return stockRevision(base) == "r1" })

	for _, tc := range decisionCases() {
		t.Run(tc.name, func(t *testing.T) {
			want, err := e.Decide(context.Background(), tc.in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := stockDecide(base, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !sameDecision(want, got) {
				t.Fatalf("stock OPA decided\n%+v\nengine decided\n%+v", got, want)
			}
		})
	}

	// An unchanged bundle is answered 304; a data change reaches the stock OPA on its next poll.
	waitFor(t, logs, "a conditional request answered 304", func() bool { return bs.notModified.Load() > 0 })
	data := testData(t)
	delete(data["grants"].(map[string]any), "kb:page.read@1")
	if err := e.Load(context.Background(), data, "r2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, logs, "bundle r2 active", func() bool { return stockRevision(base) == "r2" })
	got, err := stockDecide(base, agentCall("kb:page.read@1"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := e.Decide(context.Background(), agentCall("kb:page.read@1"))
	if err != nil {
		t.Fatal(err)
	}
	if !sameDecision(want, got) || got.Allow {
		t.Fatalf("after r2: stock %+v, engine %+v", got, want)
	}
}

func waitFor(t *testing.T, logs *testnet.Output, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; opa output:\n%s", what, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func stockRevision(base string) string {
	resp, err := http.Get(base + "/v1/data/xema/revision")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var out struct {
		Result string `json:"result"`
	}
	if json.NewDecoder(resp.Body).Decode(&out) != nil {
		return ""
	}
	return out.Result
}

func stockDecide(base string, in Input) (Decision, error) {
	body, err := json.Marshal(map[string]any{"input": in})
	if err != nil {
		return Decision{}, err
	}
	resp, err := http.Post(base+"/v1/data/xema/authz/decision", "application/json", bytes.NewReader(body))
	if err != nil {
		return Decision{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Decision{}, fmt.Errorf("stock OPA answered %s", resp.Status)
	}
	var out struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return Decision{}, fmt.Errorf("decode stock OPA answer: %w", err)
	}
	if out.Result == nil {
		return Decision{}, fmt.Errorf("stock OPA: decision undefined")
	}
	var d Decision
	dec := json.NewDecoder(bytes.NewReader(out.Result))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return Decision{}, fmt.Errorf("decode stock OPA decision: %w", err)
	}
	return d, nil
}
