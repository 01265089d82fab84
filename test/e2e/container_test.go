package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"debug/elf"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/testnet"
	"github.com/xemahq/xema/internal/testpg"
)

// The container tests run the image `make image` builds (deploy/image) with podman, as a
// platform team runs it: read-only root filesystem, /data the only writable path, on the
// host's network so the containers reach the harness's PostgreSQL and the test's provider on
// loopback. They skip, saying why, only where podman cannot run; with
// XEMA_TEST_REQUIRE_PODMAN=1 (.ci/run sets it) they fail there instead.

const (
	envRequirePodman = "XEMA_TEST_REQUIRE_PODMAN"
	imageVersion     = "v0.0.0-e2e"
	imageName        = "localhost/xema:e2e"
)

var (
	imageOnce sync.Once
	imageErr  error
)

// containerMasterKey is the master key every container of a run shares: the deployment keys
// in the one PostgreSQL are wrapped under it, so each replica needs the same one.
var containerMasterKey = func() string {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(k)
}()

// podman runs the podman CLI with the repo's containers.conf unless CONTAINERS_CONF is set.
type podman struct{ t testing.TB }

func (p podman) cmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Env = os.Environ()
	if os.Getenv("CONTAINERS_CONF") == "" {
		cmd.Env = append(cmd.Env, "CONTAINERS_CONF="+filepath.Join(repoRoot(p.t), "deploy", "image", "containers.conf"))
	}
	return cmd
}

// run runs podman and returns its stdout; stderr joins the error.
func (p podman) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := p.cmd(ctx, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("podman %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func (p podman) must(args ...string) string {
	p.t.Helper()
	out, err := p.run(args...)
	if err != nil {
		p.t.Fatal(err)
	}
	return out
}

// needPodman skips (or fails under XEMA_TEST_REQUIRE_PODMAN=1) unless podman runs here, then
// builds the image once per test binary.
func needPodman(t *testing.T) podman {
	t.Helper()
	p := podman{t: t}
	cannot := func(why string) {
		t.Helper()
		if os.Getenv(envRequirePodman) == "1" {
			t.Fatalf("podman cannot run here (%s=1): %s", envRequirePodman, why)
		}
		t.Skipf("SKIP: podman cannot run here, so the image is not tested: %s (install podman and runc; %s=1 makes this a failure)", why, envRequirePodman)
	}
	if _, err := exec.LookPath("podman"); err != nil {
		cannot("podman is not on PATH")
	}
	if _, err := p.run("info", "--format", "{{.Host.OCIRuntime.Name}}"); err != nil {
		cannot(err.Error())
	}
	imageOnce.Do(func() {
		cmd := exec.Command(filepath.Join(repoRoot(t), "deploy", "image", "build.sh"), imageName)
		cmd.Env = append(os.Environ(), "VERSION="+imageVersion)
		if out, err := cmd.CombinedOutput(); err != nil {
			imageErr = fmt.Errorf("deploy/image/build.sh: %v\n%s", err, out)
		}
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return p
}

// randomName names a container or volume of this test run.
func randomName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return prefix + "-" + hex.EncodeToString(b[:])
}

// The image: a static binary on an empty base, the version label, a numeric non-root user,
// the CA bundle, and with a read-only root filesystem /data is where it can write.
func TestContainerImage(t *testing.T) {
	p := needPodman(t)

	var cfg struct {
		User       string
		Labels     map[string]string
		Volumes    map[string]any
		Entrypoint []string
	}
	if err := json.Unmarshal([]byte(p.must("image", "inspect", "--format", "{{json .Config}}", imageName)), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.User != "65532:65532" || cfg.Labels["org.opencontainers.image.version"] != imageVersion ||
		cfg.Labels["org.opencontainers.image.revision"] == "" || cfg.Volumes["/data"] == nil ||
		len(cfg.Entrypoint) != 1 || cfg.Entrypoint[0] != "/usr/bin/xema" {
		t.Fatalf("image config: %+v; want user 65532:65532, version label %s, a revision label, volume /data, entrypoint /usr/bin/xema", cfg, imageVersion)
	}
	layers := strings.Fields(p.must("image", "inspect", "--format", "{{range .RootFS.Layers}}{{.}} {{end}}", imageName))
	if len(layers) != 4 { // CA bundle, passwd+group, /data, the binary: nothing from a base image
		t.Fatalf("image has %d layers, want the 4 of deploy/image/Containerfile on scratch: %v", len(layers), layers)
	}

	bin, err := elf.Open(filepath.Join(repoRoot(t), "bin", "image", "xema"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	for _, prog := range bin.Progs {
		if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
			t.Fatalf("the image's binary is dynamically linked (%v): want CGO_ENABLED=0", prog.Type)
		}
	}

	// The files of the empty base: the CA bundle parses, the user is named.
	ctr := randomName("xema-e2e-files")
	p.must("create", "--name", ctr, imageName)
	t.Cleanup(func() { _, _ = p.run("rm", "-f", "-v", ctr) }) // -v: its anonymous /data volume too
	dir := t.TempDir()
	p.must("cp", ctr+":/etc/ssl/certs/ca-certificates.crt", filepath.Join(dir, "ca.crt"))
	p.must("cp", ctr+":/etc/passwd", filepath.Join(dir, "passwd"))
	pem, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil || !x509.NewCertPool().AppendCertsFromPEM(pem) {
		t.Fatalf("the image's CA bundle holds no certificate (%v)", err)
	}
	if passwd, _ := os.ReadFile(filepath.Join(dir, "passwd")); !strings.Contains(string(passwd), "xema:x:65532:65532:") {
		t.Fatalf("the image's /etc/passwd names no xema user 65532: %s", passwd)
	}

	run := func(args ...string) (string, error) {
		return p.run(append([]string{"run", "--rm", "--read-only", "--read-only-tmpfs=false", imageName}, args...)...)
	}
	out, err := run("version")
	if err != nil || !strings.Contains(out, imageVersion) {
		t.Fatalf("xema version in the container: %q, %v; want %s", out, err, imageVersion)
	}
	// xema writes where it is told: the data dir /data works, anywhere else is read-only.
	if _, err := run("dev", "token", "--data-dir", "/data", "--subject", "agent:x", "--env", "project"); err != nil {
		t.Fatalf("writing under /data with a read-only root: %v", err)
	}
	for _, elsewhere := range []string{"/tmp/xema", "/etc/xema", "/xema"} {
		out, err := run("dev", "token", "--data-dir", elsewhere, "--subject", "agent:x", "--env", "project")
		if err == nil || !strings.Contains(out+err.Error(), "read-only file system") {
			t.Fatalf("writing %s with a read-only root: %q, %v; want a read-only file system error", elsewhere, out, err)
		}
	}
}

// container is one `xema serve` in a container on the host's network; gw talks to it.
type container struct {
	p      podman
	name   string
	volume string
	port   int
	gw     *gateway
}

// startContainer runs the image as the chart does (serve --config, the DSN from the
// environment, /data a volume of its own, the root read-only) and waits until it is ready.
func startContainer(t *testing.T, p podman, config, dsn string) *container {
	t.Helper()
	c := &container{p: p, name: randomName("xema-e2e"), volume: randomName("xema-e2e-data")}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := p.run("logs", c.name)
			t.Logf("container %s logs:\n%s", c.name, logs)
		}
		_, _ = p.run("rm", "-f", "-t", "0", c.name)
		_, _ = p.run("volume", "rm", "-f", c.volume)
	})
	// A free port may be taken before the gateway binds it: start again on another, at most 3 times.
	for range 3 {
		c.port = testnet.FreePort(t)
		_, _ = p.run("rm", "-f", "-t", "0", c.name)
		p.must("run", "-d", "--name", c.name, "--network", "host", "--read-only", "--read-only-tmpfs=false",
			"--mount", "type=volume,src="+c.volume+",dst=/data", "-v", config+":/etc/xema/config.yaml:ro",
			"-e", "XEMA_STORE="+dsn, "-e", "XEMA_MASTER_KEY="+containerMasterKey, imageName,
			"serve", "--config", "/etc/xema/config.yaml", "--addr", fmt.Sprintf("127.0.0.1:%d", c.port))
		c.gw = &gateway{t: t, URL: fmt.Sprintf("http://127.0.0.1:%d", c.port)}
		switch err := c.waitReady(); {
		case err == nil:
			return c
		case errors.Is(err, errPortTaken):
			continue
		default:
			t.Fatal(err)
		}
	}
	t.Fatalf("container %s could not bind a free port 3 times", c.name)
	return nil
}

var errPortTaken = errors.New("address already in use")

// waitReady polls /readyz until 200, failing early if the container stops.
func (c *container) waitReady() error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(c.gw.URL + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if state, err := c.p.run("inspect", "--format", "{{.State.Status}}", c.name); err != nil || strings.TrimSpace(state) == "exited" {
			logs, _ := c.p.run("logs", c.name)
			if strings.Contains(logs, "address already in use") {
				return errPortTaken
			}
			return fmt.Errorf("container %s stopped before it was ready (%s %v); logs:\n%s", c.name, state, err, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	logs, _ := c.p.run("logs", c.name)
	return fmt.Errorf("container %s not ready after 60s; logs:\n%s", c.name, logs)
}

// token mints a token of the container's development issuer (its own key under its /data).
func (c *container) token(args ...string) string {
	c.gw.t.Helper()
	return strings.TrimSpace(c.p.must(append([]string{"exec", c.name, "/usr/bin/xema", "dev", "token", "--data-dir", "/data"}, args...)...))
}

// answered is one call that got an HTTP answer.
type answered struct {
	status  int
	auditID string
}

// Two gateway containers on one PostgreSQL database behave as one gateway: a grant made
// through one is enforced by the other, a rate limit holds in total, and one restarted under
// load leaves no answered call without its audit record.
func TestContainerReplicas(t *testing.T) {
	p := needPodman(t)
	dsn := testpg.NewDatabase(t)
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte("data-dir: /data\nstore: ${XEMA_STORE}\nlog-json: true\nshutdown-timeout: 30s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, b := startContainer(t, p, config, dsn), startContainer(t, p, config, dsn)
	prov := newProvider(t)
	admin := a.token("--subject", "user:alice", "--org-role", "org_admin", "--env", "org")
	sub := a.gw.install(admin, biomeDir(t, "ticketing", prov.URL))
	botB := b.token("--subject", "agent:support-bot", "--env", "project")
	invokeB := func() response { return b.gw.post("/v1/capabilities/invoke", botB, commentCall()) }
	waitFor(t, "B serves the grant made through A", http.StatusOK, invokeB)

	// A grant narrowed through A is enforced by B.
	expect(t, a.gw.grantCustomized(admin, sub, map[string]any{commentRef: map[string]any{"subjects": []string{"agent:nobody"}}}), http.StatusCreated)
	if took := waitFor(t, "B enforces the grant narrowed through A", http.StatusForbidden, invokeB); took > 0 {
		t.Logf("grant narrowed through container A: enforced by container B after %v", took)
	}

	// A rate limit holds across both: exactly the limit in total.
	const limit = 10
	expect(t, a.gw.grantCustomized(admin, sub, map[string]any{commentRef: map[string]any{
		"rateLimit": map[string]any{"requests": limit, "per": "1h"}}}), http.StatusCreated)
	for i, c := range []*container{a, b} {
		probe := c.token("--subject", fmt.Sprintf("agent:probe%d", i), "--env", "project")
		waitFor(t, "the container loads the limit", http.StatusOK, func() response {
			r := c.gw.post("/v1/capabilities/invoke", probe, commentCall())
			if r.Status == http.StatusOK && !strings.Contains(string(r.Raw), fmt.Sprintf(`"requests":%d`, limit)) {
				r.Status = 0
			}
			return r
		})
	}
	bots := []string{a.token("--subject", "agent:support-bot", "--env", "project"), botB}
	statuses := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 3 * limit {
		wg.Go(func() {
			r := []*container{a, b}[i%2].gw.post("/v1/capabilities/invoke", bots[i%2], commentCall())
			mu.Lock()
			statuses[r.Status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if statuses[http.StatusOK] != limit || statuses[http.StatusTooManyRequests] != 2*limit {
		t.Fatalf("%d calls over 2 containers under a limit of %d: %v", 3*limit, limit, statuses)
	}

	restartUnderLoad(t, a, b, admin, sub)
}

// restartUnderLoad lifts the limit, keeps calls going through both containers while b is
// restarted (SIGTERM, drain, start), and then finds the audit record of every answered call.
func restartUnderLoad(t *testing.T, a, b *container, admin string, sub response) {
	// A limit no load here reaches, in place of the profile's: every call runs its provider.
	expect(t, a.gw.grantCustomized(admin, sub, map[string]any{commentRef: map[string]any{
		"rateLimit": map[string]any{"requests": 100000, "per": "1m"}}}), http.StatusCreated)
	tokens := map[*container]string{}
	for _, c := range []*container{a, b} {
		tokens[c] = c.token("--subject", "agent:load-bot", "--env", "project")
		waitFor(t, "the container serves the lifted grant", http.StatusOK, func() response {
			return c.gw.post("/v1/capabilities/invoke", tokens[c], commentCall())
		})
	}

	var (
		mu      sync.Mutex
		calls   = map[*container][]answered{}
		refused atomic.Int64 // calls to b that got no answer while it restarted
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	client := &http.Client{Timeout: 60 * time.Second}
	count := func(c *container) int {
		mu.Lock()
		defer mu.Unlock()
		return len(calls[c])
	}
	for w := range 4 {
		c := []*container{a, b}[w%2]
		wg.Go(func() {
			body, _ := json.Marshal(commentCall())
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodPost, c.gw.URL+"/v1/capabilities/invoke", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tokens[c])
				resp, err := client.Do(req)
				if err != nil {
					refused.Add(1)
					time.Sleep(20 * time.Millisecond) // b is down: do not spin on refused connections
					continue
				}
				var ans struct {
					AuditID string `json:"auditId"`
				}
				err = json.NewDecoder(resp.Body).Decode(&ans)
				resp.Body.Close()
				if err != nil {
					t.Errorf("an answer without a JSON body: %d %v", resp.StatusCode, err)
				}
				mu.Lock()
				calls[c] = append(calls[c], answered{status: resp.StatusCode, auditID: ans.AuditID})
				mu.Unlock()
			}
		})
	}
	// The load runs before, during and after the restart: b answered calls before it and
	// answers again after it.
	waitCount := func(c *container, n int) {
		deadline := time.Now().Add(2 * time.Minute)
		for count(c) < n {
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("container %s answered %d calls in 2 minutes, want %d", c.name, count(c), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitCount(b, 20)
	before := count(b)
	start := time.Now()
	a.p.must("restart", "--time", "40", b.name)
	if err := b.waitReady(); err != nil {
		close(stop)
		wg.Wait()
		t.Fatal(err)
	}
	restarted := time.Since(start)
	waitCount(b, count(b)+20)
	close(stop)
	wg.Wait()

	statuses := map[int]int{}
	missing := 0
	for _, c := range []*container{a, b} {
		for _, call := range calls[c] {
			statuses[call.status]++
			if call.auditID == "" {
				t.Errorf("container %s answered %d without an auditId", c.name, call.status)
				continue
			}
			r := a.gw.get("/v1/audit/"+call.auditID, admin)
			if r.Status != http.StatusOK {
				missing++
				t.Errorf("answered %d through %s, audit record %s: %d %s", call.status, c.name, call.auditID, r.Status, r.Raw)
				continue
			}
			if call.status == http.StatusOK && (str(r.Body, "decision") != "allowed" || str(r.Body, "outcome") != "ok") {
				t.Errorf("call answered 200 has the audit record %s", r.Raw)
			}
		}
	}
	t.Logf("restart of container B under load: %d calls answered by A, %d by B (%d before the restart), %d unanswered while B was down; "+
		"B ready again %v after the restart began; statuses %v; audit records missing: %d",
		len(calls[a]), len(calls[b]), before, refused.Load(), restarted.Round(time.Millisecond), statuses, missing)
}

// TestContainerRunAsDocumented runs docs/operations.md's image block as written, in bash from
// the repository's root, with the first block's values set (the test's image, a container and
// volume of its own, a free port) and no CONTAINERS_CONF of the test's: the demo biome mounted,
// the container ready, an agent's first call answered.
func TestContainerRunAsDocumented(t *testing.T) {
	p := needPodman(t)
	inputs := map[string]string{"IMAGE": imageName, "NAME": randomName("xema-e2e-doc"), "VOLUME": randomName("xema-e2e-doc-data"),
		"PORT": strconv.Itoa(testnet.FreePort(t))}
	for _, name := range regexp.MustCompile(`(?m)(?:^|\s)([A-Z_]+)=`).FindAllStringSubmatch(docBlock(t, "operations.md", "image:inputs"), -1) {
		if _, ok := inputs[name[1]]; !ok {
			t.Fatalf("the image's inputs name %s, which this test does not set", name[1])
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := p.run("logs", inputs["NAME"])
			t.Logf("container logs:\n%s", logs)
		}
		_, _ = p.run("rm", "-f", "-t", "0", inputs["NAME"])
		_, _ = p.run("volume", "rm", "-f", inputs["VOLUME"])
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", docBlock(t, "operations.md", "image:run"))
	cmd.Dir = repoRoot(t)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONTAINERS_CONF=") { // the doc's own setting, not the test's
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range inputs {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"status":"ready"`) || !strings.Contains(string(out), `"auditId":"inv_`) || !strings.Contains(string(out), "Welcome") {
		t.Fatalf("the documented run (%v) did not answer the first call:\n%s", err, out)
	}
}
