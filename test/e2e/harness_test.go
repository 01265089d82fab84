// Package e2e holds black-box tests: they build the xema binary, start `xema serve` on a
// free port with a temp data dir (once on SQLite, once on PostgreSQL) and talk to it only
// over HTTP and the CLI, as a user would.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/testnet"
	"github.com/xemahq/xema/internal/testpg"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// repoRoot is two levels above this file.
func repoRoot(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// xemaBinary builds cmd/xema once per test binary, or uses $XEMA_E2E_BIN when set (a binary
// built elsewhere, e.g. from a clean checkout while the tree is mid-edit).
func xemaBinary(t testing.TB) string {
	buildOnce.Do(func() {
		if binPath = os.Getenv("XEMA_E2E_BIN"); binPath != "" {
			return
		}
		dir, err := os.MkdirTemp("", "xema-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "xema")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/xema")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// gateway is one running `xema serve`.
type gateway struct {
	t       testing.TB
	bin     string
	URL     string
	DataDir string
	Store   string
	logs    *testnet.Output
	cmd     *exec.Cmd
	// exited is closed once cmd has ended, with its Wait error in exitErr.
	exited  chan struct{}
	exitErr error
}

type engineCase struct {
	name  string
	store func(t testing.TB) string // the --store DSN, "" for SQLite
}

// engines are the two storage engines every e2e test runs on.
var engines = []engineCase{
	{"sqlite", func(testing.TB) string { return "" }},
	{"postgres", func(t testing.TB) string { return testpg.NewDatabase(t) }},
}

func forEachEngine(t *testing.T, fn func(t *testing.T, e engineCase)) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) { fn(t, e) })
	}
}

// urlVar, in an argument of startGateway, stands for the gateway's own URL.
const urlVar = "{{url}}"

// startGateway runs `xema serve` with the repo's biomes and the demo dev grant, plus args.
func startGateway(t testing.TB, storeDSN string, args ...string) *gateway {
	t.Helper()
	g := &gateway{t: t, bin: xemaBinary(t), DataDir: t.TempDir(), Store: storeDSN, logs: &testnet.Output{}}
	g.start(args...)
	return g
}

// start runs the gateway on a port picked free just before it binds it; another process may
// take the port in between (bind: address already in use): the gateway is then started again
// on a fresh port, at most 3 times.
func (g *gateway) start(args ...string) {
	g.t.Helper()
	for range 3 {
		if g.startOnce(args...) {
			return
		}
	}
	g.t.Fatalf("gateway could not bind a free port 3 times; logs:\n%s", g.logs.String())
}

// startOnce starts the gateway and waits until it is ready; false when it lost its port.
func (g *gateway) startOnce(args ...string) bool {
	t := g.t
	t.Helper()
	port := testnet.FreePort(t)
	g.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
	full := []string{"serve", "--addr", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", g.DataDir,
		"--biomes", filepath.Join(repoRoot(t), "biomes"), "--dev-grant", "demo"}
	if g.Store != "" {
		full = append(full, "--store", g.Store)
	}
	for _, a := range args {
		// "{{url}}" stands for the gateway's own URL, known only once its port is picked
		// (e.g. --public-url {{url}}).
		full = append(full, strings.ReplaceAll(a, urlVar, g.URL))
	}
	g.cmd = exec.Command(g.bin, full...)
	g.cmd.Stdout, g.cmd.Stderr = g.logs, g.logs
	logStart := len(g.logs.String())
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	g.exited = exited
	go func() { g.exitErr = g.cmd.Wait(); close(exited) }()
	t.Cleanup(g.stop)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(g.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		select {
		case <-exited:
			if strings.Contains(g.logs.String()[logStart:], "address already in use") {
				return false
			}
			t.Fatalf("gateway exited before it was ready (%v); logs:\n%s", g.exitErr, g.logs.String())
		default:
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("gateway did not become ready; logs:\n%s", g.logs.String())
	return false
}

// wait waits for the gateway to end and returns how it ended (exec.Cmd.Wait's error).
func (g *gateway) wait() error {
	<-g.exited
	return g.exitErr
}

func (g *gateway) stop() {
	if g.cmd == nil || g.cmd.Process == nil {
		return
	}
	select {
	case <-g.exited:
		return
	default:
	}
	_ = g.cmd.Process.Signal(os.Interrupt)
	select {
	case <-g.exited:
	case <-time.After(10 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.exited
	}
	if g.t.Failed() {
		g.t.Logf("gateway logs:\n%s", g.logs.String())
	}
}

// token mints a development token with `xema dev token`.
func (g *gateway) token(args ...string) string {
	g.t.Helper()
	out, err := g.run(append([]string{"dev", "token", "--data-dir", g.DataDir}, args...)...)
	if err != nil {
		g.t.Fatalf("dev token %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(out)
}

// run runs the xema CLI and returns its combined output.
func (g *gateway) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, g.bin, args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// response is a decoded answer.
type response struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    []byte
}

// post sends a JSON body (a string is sent as is) with a bearer token.
func (g *gateway) post(path, token string, body any) response {
	g.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			g.t.Fatal(err)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, g.URL+path, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return g.do(req)
}

func (g *gateway) get(path, token string) response {
	g.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, g.URL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return g.do(req)
}

func (g *gateway) do(req *http.Request) response {
	g.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := response{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	_ = json.Unmarshal(raw, &r.Body)
	return r
}

func TestMain(m *testing.M) {
	testpg.Main(m)
}

// expect fails the test unless r has status want, printing the body.
func expect(t testing.TB, r response, want int) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("status %d, want %d; body: %s", r.Status, want, r.Raw)
	}
}

// str reads a string at a dotted path of a decoded body ("" if absent).
func str(body map[string]any, path string) string {
	var cur any = body
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[k]
	}
	s, _ := cur.(string)
	return s
}

// refsOf lists the "ref" of each object in body[key].
func refsOf(body map[string]any, key string) []string {
	items, _ := body[key].([]any)
	refs := []string{}
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			refs = append(refs, fmt.Sprint(m["ref"]))
		}
	}
	return refs
}

// adminToken is an org administrator's token in the org environment.
func (g *gateway) adminToken() string {
	return g.token("--subject", "user:alice", "--org-role", "org_admin", "--env", "org")
}

// biomeDir copies testdata/NAME to a temp dir with every "http://PROVIDER" replaced by url.
func biomeDir(t testing.TB, name, url string) string {
	t.Helper()
	src := filepath.Join(repoRoot(t), "test", "e2e", "testdata", name)
	dst := filepath.Join(t.TempDir(), name)
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), bytes.ReplaceAll(raw, []byte("http://PROVIDER"), []byte(url)), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// submission is the body of POST /v1/biomes for a biome directory.
func submission(t testing.TB, dir string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "biome.json"))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "contributions", "*.capability.contribution.json"))
	contribs := []json.RawMessage{}
	for _, f := range files {
		c, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		contribs = append(contribs, c)
	}
	return map[string]any{"manifest": json.RawMessage(raw), "contributions": contribs}
}

// install submits a biome directory and approves its digest with the default profile; it
// returns the submission's answer.
func (g *gateway) install(admin, dir string) response {
	g.t.Helper()
	sub := g.post("/v1/biomes", admin, submission(g.t, dir))
	expect(g.t, sub, http.StatusCreated)
	grant := g.post("/v1/grants", admin, map[string]any{
		"biomeId": str(sub.Body, "biomeId"), "version": str(sub.Body, "version"), "digestHash": str(sub.Body, "digest.hash")})
	expect(g.t, grant, http.StatusCreated)
	return sub
}

// digestOf reads the permission digest hash of a biome version the admin's org may install.
func (g *gateway) digestOf(admin, id, version string) string {
	g.t.Helper()
	r := g.get("/v1/biomes/"+id+"/"+version, admin)
	expect(g.t, r, http.StatusOK)
	return str(r.Body, "digest.hash")
}

// providerCall is one request an http provider received.
type providerCall struct {
	Path   string
	Header http.Header
	Body   []byte
}

// provider is an http capability provider: it records each call and answers by its mode
// ("500" with a 500, "notjson" with HTML, otherwise a JSON echo of the input).
type provider struct {
	URL   string
	mu    sync.Mutex
	mode  string
	calls []providerCall
}

func (p *provider) setMode(mode string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = mode
}

func newProvider(t testing.TB) *provider {
	p := &provider{}
	srv := httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

func (p *provider) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	p.calls = append(p.calls, providerCall{Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	mode := p.mode
	p.mu.Unlock()
	switch mode {
	case "500":
		http.Error(w, `{"error":"internal"}`, http.StatusInternalServerError)
	case "notjson":
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html>oops</html>"))
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88","path":%q,"received":%s}`, r.URL.Path, body)
	}
}

// last returns the most recent call.
func (p *provider) last(t testing.TB) providerCall {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.calls) == 0 {
		t.Fatal("the provider received no call")
	}
	return p.calls[len(p.calls)-1]
}

func (p *provider) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}
