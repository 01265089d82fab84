// Package hydratest runs a real ory/hydra v2.3.0 for tests: the binary is built once from
// the tools/hydra module and cached, each test gets its own in-memory instance.
package hydratest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/testnet"
)

// Version is the hydra release built from tools/hydra.
const Version = "v2.3.0"

// CacheDir is where the binary is kept: $XEMA_CACHE_DIR/hydra, else <user cache>/xema/hydra.
func CacheDir() (string, error) {
	if d := os.Getenv("XEMA_CACHE_DIR"); d != "" {
		return filepath.Join(d, "hydra"), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "xema", "hydra"), nil
}

// Binary returns the cached hydra binary, building it first if missing (about 4-6 minutes
// cold). A failed build fails the test: these tests never skip.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := BuildBinary(t.Logf)
	if err != nil {
		t.Fatalf("%v (these tests need a real hydra and do not skip)", err)
	}
	return bin
}

// BuildBinary is Binary for a test that may skip when hydra cannot be had: it returns the
// cached binary, building it first if missing, or why it could not. logf reports a build.
func BuildBinary(logf func(format string, args ...any)) (string, error) {
	dir, err := CacheDir()
	if err != nil {
		return "", fmt.Errorf("hydra: no cache dir: %w", err)
	}
	bin := binPath(dir)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("hydra: cache dir: %w", err)
	}
	// Several test packages may need the binary at once: one builds, the others wait.
	lock, err := os.OpenFile(filepath.Join(dir, ".build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("hydra: lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("hydra: lock: %w", err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	_, self, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(self), "..", "..", "..", "tools", "hydra", "build.sh")
	logf("hydra: building %s with %s (first run only, takes minutes)", Version, script)
	out, err := exec.Command("sh", script, dir).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("hydra: %s failed: %v\n%s", script, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != bin {
		return "", fmt.Errorf("hydra: %s built %q, want %q", script, got, bin)
	}
	return bin, nil
}

func binPath(dir string) string { return filepath.Join(dir, "hydra-"+Version+"-sqlite") }

// Server is one running hydra.
type Server struct {
	PublicURL string // http://127.0.0.1:P
	AdminURL  string // http://127.0.0.1:A
	Issuer    string // PublicURL + "/"
	// LoginURL is the test login and consent app's base URL (StartWithLogin only).
	LoginURL string
}

// TokenURL is the OAuth2 token endpoint.
func (s *Server) TokenURL() string { return s.PublicURL + "/oauth2/token" }

// JWKSURL is where hydra publishes its signing keys.
func (s *Server) JWKSURL() string { return s.PublicURL + "/.well-known/jwks.json" }

// PublicURLVar, in a value of Start's extraEnv, stands for the public URL, whose port is
// picked only as hydra starts.
const PublicURLVar = "{{public}}"

// Start runs hydra in memory with JWT access tokens until the test ends. extraEnv adds
// configuration (e.g. "TTL_ACCESS_TOKEN=5s"). Its ports are picked free just before hydra
// binds them, so another process may take one in between: hydra then exits at once and is
// started again on fresh ports (at most 3 tries).
func Start(t testing.TB, extraEnv ...string) *Server {
	t.Helper()
	bin := Binary(t)
	var lastLogs string
	for range 3 {
		s, logs, exited := start(t, bin, extraEnv)
		if !exited {
			return s
		}
		lastLogs = logs
	}
	t.Fatalf("hydra exited before it was ready, 3 times:\n%s", lastLogs)
	return nil
}

// start runs one hydra and waits until it is ready; exited reports that it stopped first.
func start(t testing.TB, bin string, extraEnv []string) (s *Server, logs string, exited bool) {
	t.Helper()
	pub, adm := testnet.FreePort(t), testnet.FreePort(t)
	s = &Server{
		PublicURL: "http://127.0.0.1:" + strconv.Itoa(pub),
		AdminURL:  "http://127.0.0.1:" + strconv.Itoa(adm),
	}
	s.Issuer = s.PublicURL + "/"
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "serve", "all", "--dev", "--sqa-opt-out")
	cmd.Env = append(os.Environ(),
		"DSN=memory",
		"SECRETS_SYSTEM=xema-test-system-secret-0123456789abcdef",
		"STRATEGIES_ACCESS_TOKEN=jwt",
		"SERVE_PUBLIC_HOST=127.0.0.1", "SERVE_PUBLIC_PORT="+strconv.Itoa(pub),
		"SERVE_ADMIN_HOST=127.0.0.1", "SERVE_ADMIN_PORT="+strconv.Itoa(adm),
		"URLS_SELF_ISSUER="+s.Issuer,
		"LOG_LEVEL=warn",
	)
	for _, e := range extraEnv {
		cmd.Env = append(cmd.Env, strings.ReplaceAll(e, PublicURLVar, s.PublicURL))
	}
	var out testnet.Output
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("hydra: start: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.AdminURL + "/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				s.warmKeys(t)
				return s, "", false
			}
		}
		select {
		case <-done:
			return nil, strings.TrimSpace(out.String()), true
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("hydra not ready after 30s:\n%s", strings.TrimSpace(out.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// warmKeys has hydra create its signing keys now: it generates them on the first request
// that needs them (RSA 4096, over ten seconds on a loaded machine), which would otherwise eat
// the deadline of the test's first JWKS fetch or authorization request. Hydra cuts a slow
// answer off (EOF) while the generation goes on, so the fetch is repeated until the keys are
// served.
func (s *Server) warmKeys(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, err := s.signingKeys()
		if err == nil && n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("hydra: no signing keys after 2m: %d key(s), %v", n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *Server) signingKeys() (int, error) {
	resp, err := http.Get(s.JWKSURL())
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	var jwks struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jwks); err != nil {
		return 0, err
	}
	return len(jwks.Keys), nil
}

// Client is a registered OAuth2 client.
type Client struct {
	ID     string
	Secret string
}

// CreateClient registers a client_credentials client allowed to ask for audience.
func (s *Server) CreateClient(t testing.TB, audience ...string) Client {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"grant_types":                []string{"client_credentials"},
		"token_endpoint_auth_method": "client_secret_basic",
		"audience":                   audience,
		"access_token_strategy":      "jwt",
	})
	resp, err := http.Post(s.AdminURL+"/admin/clients", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("hydra: create client: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("hydra: create client: %s: %s", resp.Status, b)
	}
	var c struct {
		ID     string `json:"client_id"`
		Secret string `json:"client_secret"`
	}
	if err := json.Unmarshal(b, &c); err != nil || c.ID == "" || c.Secret == "" {
		t.Fatalf("hydra: create client: unexpected answer %s (%v)", b, err)
	}
	return Client{ID: c.ID, Secret: c.Secret}
}
