package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// countingProvider is an http provider that counts the requests it receives per call key
// (the input's "title" for ticket:create, "text" for ticket:comment.add) and can hold calls
// until released.
type countingProvider struct {
	URL     string
	mu      sync.Mutex
	byKey   map[string]int
	hold    chan struct{} // non-nil: each call waits for it to close
	arrived chan string   // each call's key, when set (buffered)
}

func newCountingProvider(t testing.TB) *countingProvider {
	cp := &countingProvider{byKey: map[string]int{}}
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var in struct{ Title, Text string }
		_ = json.Unmarshal(body, &in)
		key := in.Title + in.Text
		cp.mu.Lock()
		cp.byKey[key]++
		hold, arrived := cp.hold, cp.arrived
		cp.mu.Unlock()
		if arrived != nil {
			arrived <- key
		}
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88","received":%s}`, body)
	}))
	cp.URL = srv
	return cp
}

func newServer(t testing.TB, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func (cp *countingProvider) count(key string) int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.byKey[key]
}

// holdCalls makes the next calls wait until the returned release is called; arrivals are
// announced on the returned channel.
func (cp *countingProvider) holdCalls(buffer int) (arrived <-chan string, release func()) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	hold := make(chan struct{})
	ch := make(chan string, buffer)
	cp.hold, cp.arrived = hold, ch
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			cp.mu.Lock()
			cp.hold, cp.arrived = nil, nil
			cp.mu.Unlock()
			close(hold)
		})
	}
}

// kill ends the gateway with SIGKILL (no drain, no flush) and waits for it.
func (g *gateway) kill() {
	_ = g.cmd.Process.Signal(syscall.SIGKILL)
	_ = g.wait()
}

// restart starts the gateway again on the same data dir and store.
func (g *gateway) restart(args ...string) { g.start(args...) }

// try sends a request and returns status 0 instead of failing when the connection breaks
// (the gateway was killed under it).
func (g *gateway) try(method, path, token, key string, body any) response {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, g.URL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}
	}
	r := response{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	_ = json.Unmarshal(raw, &r.Body)
	return r
}

func createInput(title string) map[string]any {
	return map[string]any{"ref": "ticket:create@1", "input": map[string]any{"title": title, "priority": "normal",
		"dueAt": "2030-01-01T00:00:00Z", "count": 1, "reporter": map[string]any{"email": "a@example.com", "id": "3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88"}}}
}

func commentInput(text string) map[string]any {
	return map[string]any{"ref": commentRef, "input": map[string]any{"ticketId": "3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88", "text": text}}
}

// crashTotals are the counts of a crash run, logged for the results page.
type crashTotals struct {
	kills, invokes, answered, auditMissing, doubleRuns, replayed, inUse            int
	approvals, approvalsAnswered, stuck, recoveredPending, interrupted, reapproved int
}

// TestCrashKill9 kills the gateway with SIGKILL at random points while invokes (with
// idempotency keys) and approvals are in flight, restarts it, and checks the invariants:
// every answered call has its audit record, no call reached its provider twice (counted per
// key and per approval), a retry under the same key never runs the call again, and no
// approval is left approved/running/dispatched after the restart; one sent back to pending
// can be approved again and then runs once.
func TestCrashKill9(t *testing.T) {
	runs := 10
	if testing.Short() {
		runs = 3
	}
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		prov := newCountingProvider(t)
		admin := g.adminToken()
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		sub := g.install(admin, biomeDir(t, "ticketing", prov.URL))
		expect(t, g.grantCustomized(admin, sub, map[string]any{commentRef: map[string]any{"requiresApproval": true}}), http.StatusCreated)

		var tot crashTotals
		answeredIDs := map[string]string{} // auditId → key, of calls answered 200 before a kill
		for run := range runs {
			// Held calls to approve during this run.
			const perRun = 4
			var apr []string
			texts := map[string]string{}
			for i := range perRun {
				text := fmt.Sprintf("r%d-c%d", run, i)
				r := g.post("/v1/capabilities/invoke", bot, commentInput(text))
				expect(t, r, http.StatusAccepted)
				apr = append(apr, str(r.Body, "approvalId"))
				texts[str(r.Body, "approvalId")] = text
			}
			tot.approvals += perRun
			const calls = 24
			keys := make([]string, calls)
			answers := make([]response, calls)
			approved := make([]response, perRun)
			var wg sync.WaitGroup
			for i := range calls {
				keys[i] = fmt.Sprintf("r%d-k%d", run, i)
				wg.Add(1)
				go func() {
					defer wg.Done()
					answers[i] = g.try(http.MethodPost, "/v1/capabilities/invoke", bot, keys[i], createInput(keys[i]))
				}()
			}
			for i, id := range apr {
				wg.Add(1)
				go func() {
					defer wg.Done()
					approved[i] = g.try(http.MethodPost, "/v1/approvals/"+id+"/approve", admin, "", map[string]any{})
				}()
			}
			time.Sleep(time.Duration(20+rand.IntN(300)) * time.Millisecond) // the kill point, not a synchronisation
			g.kill()
			tot.kills++
			wg.Wait()
			tot.invokes += calls
			for i, a := range answers {
				if a.Status == http.StatusOK {
					tot.answered++
					answeredIDs[str(a.Body, "auditId")] = keys[i]
				}
			}
			for _, a := range approved {
				if a.Status == http.StatusOK {
					tot.approvalsAnswered++
				}
			}
			g.restart()

			// Retry every call with its key: the answer is the first call's, or 409 when
			// it ran without its answer stored; never a second run.
			for i, key := range keys {
				r := g.try(http.MethodPost, "/v1/capabilities/invoke", bot, key, createInput(key))
				switch {
				case r.Status == http.StatusOK && r.Header.Get("Idempotent-Replayed") == "true":
					tot.replayed++
					if answers[i].Status == http.StatusOK && str(r.Body, "auditId") != str(answers[i].Body, "auditId") {
						t.Errorf("key %s: replay has auditId %s, first answer %s", key, str(r.Body, "auditId"), str(answers[i].Body, "auditId"))
					}
				case r.Status == http.StatusOK:
				case r.Status == http.StatusConflict && str(r.Body, "code") == "IDEMPOTENCY_KEY_IN_USE":
					tot.inUse++
				default:
					t.Errorf("retry of %s: %d %s", key, r.Status, r.Raw)
				}
				if n := prov.count(key); n > 1 {
					tot.doubleRuns++
					t.Errorf("key %s reached the provider %d times", key, n)
				}
			}
			// No approval stays in flight; a recovered one can be approved again.
			for _, id := range apr {
				inv := g.get("/v1/invocations/"+id, bot)
				expect(t, inv, http.StatusOK)
				switch st := str(inv.Body, "status"); st {
				case "approved", "running", "dispatched":
					tot.stuck++
					t.Errorf("approval %s is %s after the restart: %s", id, st, inv.Raw)
				case "pending":
					if str(inv.Body, "outcome") == "RECOVERED_NOT_DISPATCHED" {
						tot.recoveredPending++
					}
					if prov.count(texts[id]) != 0 {
						t.Errorf("approval %s is pending again though its call reached the provider", id)
					}
					again := g.post("/v1/approvals/"+id+"/approve", admin, map[string]any{})
					expect(t, again, http.StatusOK)
					tot.reapproved++
				case "interrupted":
					tot.interrupted++
				case "done", "failed":
				default:
					t.Errorf("approval %s: status %q", id, st)
				}
				if n := prov.count(texts[id]); n > 1 {
					tot.doubleRuns++
					t.Errorf("approval %s reached the provider %d times", id, n)
				}
			}
		}
		for id, key := range answeredIDs {
			if r := g.get("/v1/audit/"+id, bot); r.Status != http.StatusOK || str(r.Body, "outcome") != "ok" {
				tot.auditMissing++
				t.Errorf("call %s (key %s) was answered 200 but its audit record is %d %s", id, key, r.Status, r.Raw)
			}
		}
		t.Logf("FAULTS kill9 engine=%s runs=%d kills=%d invokes=%d answered=%d auditMissing=%d doubleRuns=%d replayed=%d inUse409=%d "+
			"approvals=%d approveAnswered=%d stuck=%d recoveredPending=%d interrupted=%d reapproved=%d",
			e.name, runs, tot.kills, tot.invokes, tot.answered, tot.auditMissing, tot.doubleRuns, tot.replayed, tot.inUse,
			tot.approvals, tot.approvalsAnswered, tot.stuck, tot.recoveredPending, tot.interrupted, tot.reapproved)
	})
}

// TestIdempotencyKeys: same key and caller replays the answer (HTTP header and MCP
// argument), another input under the key is 422, another caller's key is its own.
func TestIdempotencyKeys(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g, prov, bot := ticketingGateway(t, e.store(t))
		other := g.token("--subject", "agent:other-bot", "--env", "project")

		first := g.try(http.MethodPost, "/v1/capabilities/invoke", bot, "key-1", createInput("idem-1"))
		expect(t, first, http.StatusOK)
		again := g.try(http.MethodPost, "/v1/capabilities/invoke", bot, "key-1", createInput("idem-1"))
		expect(t, again, http.StatusOK)
		if again.Header.Get("Idempotent-Replayed") != "true" || str(again.Body, "auditId") != str(first.Body, "auditId") {
			t.Fatalf("replay %s (header %q), first %s", again.Raw, again.Header.Get("Idempotent-Replayed"), first.Raw)
		}
		if prov.count("idem-1") != 1 {
			t.Fatalf("provider got %d calls for one key", prov.count("idem-1"))
		}
		misuse := g.try(http.MethodPost, "/v1/capabilities/invoke", bot, "key-1", createInput("idem-other"))
		if misuse.Status != http.StatusUnprocessableEntity || str(misuse.Body, "code") != "IDEMPOTENCY_KEY_REUSED" {
			t.Fatalf("other input under the key: %d %s", misuse.Status, misuse.Raw)
		}
		mine := g.try(http.MethodPost, "/v1/capabilities/invoke", other, "key-1", createInput("idem-1"))
		expect(t, mine, http.StatusOK)
		if mine.Header.Get("Idempotent-Replayed") == "true" || prov.count("idem-1") != 2 {
			t.Fatalf("another caller's key was shared: %s", mine.Raw)
		}
		bad := g.try(http.MethodPost, "/v1/capabilities/invoke", bot, "key with spaces", createInput("x"))
		if bad.Status != http.StatusBadRequest || str(bad.Body, "code") != "INVALID_IDEMPOTENCY_KEY" {
			t.Fatalf("bad key: %d %s", bad.Status, bad.Raw)
		}
		// An error answer of a call that ran is replayed too (a provider 502).
		s, err := mcpSession(t, g, bot)
		if err != nil {
			t.Fatal(err)
		}
		args := map[string]any{"ref": "ticket:create@1", "input": createInput("idem-mcp")["input"], "idempotencyKey": "mcp-1"}
		b1, isErr1 := callTool(t, s, "xema_capabilities_invoke", args)
		b2, isErr2 := callTool(t, s, "xema_capabilities_invoke", args)
		if isErr1 || isErr2 || str(b1, "auditId") == "" || str(b1, "auditId") != str(b2, "auditId") || prov.count("idem-mcp") != 1 {
			t.Fatalf("MCP idempotency: %v %v, %v %v, provider %d", b1, isErr1, b2, isErr2, prov.count("idem-mcp"))
		}
	})
}

// TestCrashProviderTimeoutIs504: a provider slower than its timeoutMs is a 504 PROVIDER_TIMEOUT.
func TestCrashProviderTimeoutIs504(t *testing.T) {
	g := startGateway(t, "")
	prov := newCountingProvider(t)
	admin := g.adminToken()
	bot := g.token("--subject", "agent:support-bot", "--env", "project")
	dir := biomeDir(t, "ticketing", prov.URL)
	path := dir + "/contributions/create.capability.contribution.json"
	raw, _ := os.ReadFile(path)
	_ = os.WriteFile(path, bytes.Replace(raw, []byte(`"timeoutMs": 5000`), []byte(`"timeoutMs": 200`), 1), 0o644)
	g.install(admin, dir)
	_, release := prov.holdCalls(4)
	defer release()
	r := g.post("/v1/capabilities/invoke", bot, createInput("slow"))
	if r.Status != http.StatusGatewayTimeout || str(r.Body, "code") != "PROVIDER_TIMEOUT" || str(r.Body, "auditId") == "" {
		t.Fatalf("slow provider: %d %s", r.Status, r.Raw)
	}
}

// waitUntil polls cond (a condition, not a sleep as synchronisation) until it holds or the
// timeout passes.
func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func countLines(logs, substr string) int { return strings.Count(logs, substr) }
