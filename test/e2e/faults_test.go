package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/testnet"
	"github.com/xemahq/xema/internal/testpg"
)

// ticketingGateway starts a gateway on storeDSN (args passed on) with the ticketing biome
// served by a counting provider; it returns the gateway, the provider and the token of
// agent:support-bot (project environment).
func ticketingGateway(t *testing.T, storeDSN string, args ...string) (*gateway, *countingProvider, string) {
	t.Helper()
	g := startGateway(t, storeDSN, args...)
	prov := newCountingProvider(t)
	admin := g.adminToken()
	bot := g.token("--subject", "agent:support-bot", "--env", "project")
	g.install(admin, biomeDir(t, "ticketing", prov.URL))
	return g, prov, bot
}

// ready reports /readyz's status (0 when the gateway does not answer).
func (g *gateway) ready() int {
	resp, err := http.Get(g.URL + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// outcomeOf is the outcome the audit record of id shows (its outcome record merged in).
func (g *gateway) outcomeOf(token, id string) string {
	r := g.try(http.MethodGet, "/v1/audit/"+id, token, "", nil)
	if r.Status != http.StatusOK {
		return ""
	}
	return str(r.Body, "outcome")
}

// TestCrashPostgresStopped stops PostgreSQL while a call is at its provider: the answer is a
// typed 500 OUTCOME_NOT_RECORDED with the decision's auditId (never "denied"), /readyz fails
// while the store is down, calls meanwhile are refused with 503 (nothing runs), the outage
// is logged once, and once PostgreSQL is back the spooled outcome is recorded, the same
// Idempotency-Key replays the first answer, and /readyz is ready again.
func TestCrashPostgresStopped(t *testing.T) {
	g, prov, bot := ticketingGateway(t, testpg.NewDatabase(t))

	arrived, release := prov.holdCalls(1)
	defer release()
	answer := make(chan response, 1)
	go func() { answer <- g.try(http.MethodPost, "/v1/capabilities/invoke", bot, "pg-1", createInput("pg-1")) }()
	<-arrived
	testpg.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			testpg.Resume(t)
		}
	}()
	release()
	r := <-answer
	if r.Status != http.StatusInternalServerError || str(r.Body, "code") != "OUTCOME_NOT_RECORDED" || str(r.Body, "auditId") == "" ||
		str(r.Body, "outcome") != "ok" || strings.Contains(string(r.Raw), "was denied") {
		t.Fatalf("call that ran while the store stopped: %d %s", r.Status, r.Raw)
	}
	auditID := str(r.Body, "auditId")
	waitUntil(t, 10*time.Second, "/readyz to fail while PostgreSQL is stopped", func() bool { return g.ready() == http.StatusServiceUnavailable })
	const during = 30
	refused := 0
	for i := range during {
		d := g.try(http.MethodPost, "/v1/capabilities/invoke", bot, "", createInput(fmt.Sprintf("pg-during-%d", i)))
		if d.Status == http.StatusServiceUnavailable {
			refused++
		}
	}
	if refused != during || prov.count("pg-during-0") != 0 {
		t.Fatalf("%d of %d calls refused during the outage; provider got %d", refused, during, prov.count("pg-during-0"))
	}
	testpg.Resume(t)
	resumed = true
	waitUntil(t, 30*time.Second, "the spooled outcome to be recorded", func() bool { return g.outcomeOf(bot, auditID) == "ok" })
	waitUntil(t, 10*time.Second, "/readyz to be ready again", func() bool { return g.ready() == http.StatusOK })
	var replay response
	waitUntil(t, 10*time.Second, "the idempotency answer to be stored", func() bool {
		replay = g.try(http.MethodPost, "/v1/capabilities/invoke", bot, "pg-1", createInput("pg-1"))
		return replay.Header.Get("Idempotent-Replayed") == "true"
	})
	if str(replay.Body, "auditId") != auditID || prov.count("pg-1") != 1 {
		t.Fatalf("retry under the key: %d %s; provider calls %d", replay.Status, replay.Raw, prov.count("pg-1"))
	}
	expect(t, g.try(http.MethodPost, "/v1/capabilities/invoke", bot, "", createInput("pg-after")), http.StatusOK)
	waitUntil(t, 5*time.Second, "the outage's end to be logged", func() bool { return strings.Contains(g.logs.String(), "outage ended") })
	if out, code := g.cli(t, append([]string{"audit", "verify"}, g.storeArgs()...)...); code != 0 || !strings.Contains(out, "intact") {
		t.Errorf("audit chain after the spooled outcome: exit %d: %s", code, out)
	}
	logs := g.logs.String()
	begins, ends := countLines(logs, "outage begins"), countLines(logs, "outage ended")
	if begins == 0 || begins > 4 || ends == 0 {
		t.Errorf("outage logged %d times at its start and %d at its end for %d failed calls; want once per dependency", begins, ends, during)
	}
	t.Logf("FAULTS pg-stopped: answer=%d %s, refusedDuringOutage=%d/%d, outageBeginLines=%d, outageEndLines=%d, errorLines=%d",
		r.Status, str(r.Body, "code"), refused, during, begins, ends, countLines(logs, "level=ERROR"))
}

// TestCrashDiskFull runs the SQLite store on a small tmpfs and fills it while a call is at
// its provider. Every answer tells the truth: 200 with its audit record, 503 before anything
// ran, or 500 OUTCOME_NOT_RECORDED with the auditId (the outcome spooled to the
// preallocated spool file). Once space is freed every outcome is recorded.
func TestCrashDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("full-disk test skipped: mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("full-disk test skipped: mount -t tmpfs is not allowed here: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	g := &gateway{t: t, bin: xemaBinary(t), DataDir: filepath.Join(dir, "data"), logs: &testnet.Output{}}
	g.start()
	prov := newCountingProvider(t)
	admin := g.adminToken()
	bot := g.token("--subject", "agent:support-bot", "--env", "project")
	g.install(admin, biomeDir(t, "ticketing", prov.URL))

	arrived, release := prov.holdCalls(1)
	answer := make(chan response, 1)
	go func() { answer <- g.try(http.MethodPost, "/v1/capabilities/invoke", bot, "", createInput("disk-0")) }()
	<-arrived
	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	release()
	answers := []response{<-answer}
	for i := 1; i < 200; i++ {
		r := g.try(http.MethodPost, "/v1/capabilities/invoke", bot, "", createInput(fmt.Sprintf("disk-%d", i)))
		answers = append(answers, r)
		if r.Status != http.StatusOK {
			break // the store is full: the next ones fail alike
		}
	}
	var ok, refused, notRecorded int
	var spooled []string
	for i, r := range answers {
		switch {
		case r.Status == http.StatusOK:
			ok++
		case r.Status == http.StatusServiceUnavailable && str(r.Body, "code") == "AUDIT_UNAVAILABLE":
			refused++
			if prov.count(fmt.Sprintf("disk-%d", i)) != 0 {
				t.Errorf("call %d answered 503 (not run) reached the provider", i)
			}
		case r.Status == http.StatusInternalServerError && str(r.Body, "code") == "OUTCOME_NOT_RECORDED" && str(r.Body, "auditId") != "":
			notRecorded++
			spooled = append(spooled, str(r.Body, "auditId"))
		default:
			t.Errorf("call %d on a full disk: %d %s", i, r.Status, r.Raw)
		}
	}
	fullReady := g.ready()
	if ok == len(answers) {
		t.Logf("the store took every write on the full tmpfs (WAL space reused); nothing to spool")
	} else if fullReady != http.StatusServiceUnavailable {
		t.Errorf("/readyz answered %d while writes fail", fullReady)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for _, id := range spooled {
		waitUntil(t, 30*time.Second, "spooled outcome "+id, func() bool { return g.outcomeOf(bot, id) == "ok" })
	}
	waitUntil(t, 10*time.Second, "/readyz after space is freed", func() bool { return g.ready() == http.StatusOK })
	t.Logf("FAULTS disk-full: calls=%d ok=%d refused503=%d outcomeNotRecorded500=%d readyzWhileFull=%d spooledRecorded=%d",
		len(answers), ok, refused, notRecorded, fullReady, len(spooled))
}

// fill writes path until the file system is full.
func fill(t *testing.T, path string) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	for { // the last partial blocks
		if _, err := f.Write(buf[:4096]); err != nil {
			return
		}
	}
}

// TestDrainSIGTERMSlowCalls: SIGTERM while slow calls are at their provider: the gateway
// stops accepting, lets them finish (each answered 200 with its outcome recorded), and exits 0.
func TestDrainSIGTERMSlowCalls(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g, prov, bot := ticketingGateway(t, e.store(t))
		const n = 6
		answers, wg, release := callsAtProvider(g, prov, bot, "drain", n)
		defer release()
		_ = g.cmd.Process.Signal(syscall.SIGTERM)
		waitUntil(t, 10*time.Second, "the drain to begin", func() bool { return strings.Contains(g.logs.String(), "draining in-flight calls") })
		if r := g.try(http.MethodPost, "/v1/capabilities/invoke", bot, "", createInput("after-sigterm")); r.Status != 0 {
			t.Errorf("a new call during the drain was served: %d", r.Status)
		}
		release()
		wg.Wait()
		err := g.wait()
		if err != nil {
			t.Fatalf("exit after the drain: %v\n%s", err, g.logs.String())
		}
		for i, a := range answers {
			if a.Status != http.StatusOK {
				t.Fatalf("slow call %d during the drain: %d %s", i, a.Status, a.Raw)
			}
		}
		g.restart()
		for i, a := range answers {
			if got := g.outcomeOf(bot, str(a.Body, "auditId")); got != "ok" {
				t.Errorf("call %d: outcome %q after the drain", i, got)
			}
		}
		t.Logf("FAULTS sigterm-drain engine=%s slowCalls=%d answered200=%d exit=0", e.name, n, n)
	})
}

// TestDrainDeadlineRecordsOutcomes: calls still running at --shutdown-timeout are cut off,
// each answered 503 INTERRUPTED_BY_SHUTDOWN with its auditId and its outcome recorded; the
// gateway exits 0.
func TestDrainDeadlineRecordsOutcomes(t *testing.T) {
	g, prov, bot := ticketingGateway(t, "", "--shutdown-timeout", "300ms")
	const n = 3
	answers, wg, release := callsAtProvider(g, prov, bot, "cut", n)
	defer release()
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	wg.Wait()
	if err := g.wait(); err != nil {
		t.Fatalf("exit after the cut-off: %v\n%s", err, g.logs.String())
	}
	g.restart()
	for i, a := range answers {
		if a.Status != http.StatusServiceUnavailable || str(a.Body, "code") != "INTERRUPTED_BY_SHUTDOWN" || str(a.Body, "auditId") == "" {
			t.Fatalf("call %d cut off at the deadline: %d %s", i, a.Status, a.Raw)
		}
		if got := g.outcomeOf(bot, str(a.Body, "auditId")); got != "INTERRUPTED_BY_SHUTDOWN" {
			t.Errorf("call %d: recorded outcome %q", i, got)
		}
	}
}

// callsAtProvider starts n invokes as bot and returns once all n are held at prov: their
// answers fill in as wg completes; release lets the provider answer.
func callsAtProvider(g *gateway, prov *countingProvider, bot, prefix string, n int) (answers []response, wg *sync.WaitGroup, release func()) {
	arrived, release := prov.holdCalls(n)
	answers, wg = make([]response, n), &sync.WaitGroup{}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = g.try(http.MethodPost, "/v1/capabilities/invoke", bot, "", createInput(fmt.Sprintf("%s-%d", prefix, i)))
		}()
	}
	for range n {
		<-arrived
	}
	return answers, wg, release
}
