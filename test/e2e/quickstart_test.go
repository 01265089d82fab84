package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/identity/hydratest"
	"github.com/xemahq/xema/internal/testnet"
	"github.com/xemahq/xema/internal/testpg"
)

// docBlock returns the ```sh block of the doc (a path under docs/) that follows the line
// <!-- MARK ... -->.
func docBlock(t *testing.T, doc, mark string) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", doc))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(mark) + "[ >][^>]*-->\n```sh\n(.*?)```").FindSubmatch(text)
	if m == nil {
		t.Fatalf("docs/%s has no %s block", doc, mark)
	}
	return string(m[1])
}

// quickStartBlock returns the block of docs/operations.md marked <!-- quickstart:NAME ... -->.
func quickStartBlock(t *testing.T, name string) string {
	t.Helper()
	return docBlock(t, "operations.md", "quickstart:"+name)
}

// TestProductionQuickStart runs the production quick start of docs/operations.md as written,
// in bash: hydra (real) as the issuer, a PostgreSQL database of the test's own cluster, a TLS
// certificate generated here, two replicas on the database, /readyz on both, the demo biome
// granted by an org administrator's hydra token through one, and an agent's first call with
// its hydra token through each. The inputs the doc's first block names are the ones set here.
func TestProductionQuickStart(t *testing.T) {
	needHydra(t, "the production quick start")
	for _, tool := range []string{"bash", "curl", "base64", "head"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the quick start needs %s: %v", tool, err)
		}
	}
	h := hydratest.StartWithLogin(t, map[string]hydratest.Person{
		"admin": {Subject: "user:alice", AccessToken: map[string]any{"xema_org": "acme", "xema_org_role": "org_admin", "xema_env": "org"}},
		"agent": {Subject: "agent:support-bot", AccessToken: map[string]any{"xema_org": "acme", "xema_env": "prod", "groups": []string{"support"}}},
	})
	const callback = "http://127.0.0.1:1/callback" // never reached: the flow stops at the redirect
	client := h.CreatePublicClient(t, callback, "xema")
	inputs := map[string]string{
		"XEMA_STORE":  testpg.NewDatabase(t),
		"ISSUER":      h.Issuer,
		"REPLICA_A":   "127.0.0.1:" + itoa(testnet.FreePort(t)),
		"REPLICA_B":   "127.0.0.1:" + itoa(testnet.FreePort(t)),
		"ADMIN_TOKEN": h.AuthorizationCodeToken(t, client, callback, "xema", "admin"),
		"AGENT_TOKEN": h.AuthorizationCodeToken(t, client, callback, "xema", "agent"),
	}
	for _, name := range regexp.MustCompile(`(?m)(?:^|\s)(?:export )?([A-Z_]+)=`).FindAllStringSubmatch(quickStartBlock(t, "inputs"), -1) {
		if _, ok := inputs[name[1]]; !ok {
			t.Fatalf("the quick start's inputs name %s, which this test does not set", name[1])
		}
	}

	work := t.TempDir()
	writeTestCertificate(t, work)
	if err := os.Symlink(filepath.Join(repoRoot(t), "biomes"), filepath.Join(work, "biomes")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(work, "quickstart.sh")
	if err := os.WriteFile(script, []byte(quickStartBlock(t, "run")), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Dir = work
	bin := t.TempDir() // xema on the PATH, as the doc assumes, whatever the built binary's name
	if err := os.Symlink(xemaBinary(t), filepath.Join(bin, "xema")); err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	for k, v := range inputs {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// The replicas the script starts in the background share its process group: ended with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out testnet.Output
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopGroup(t, cmd.Process.Pid) })
	err := cmd.Wait()
	logs := func() string {
		var b strings.Builder
		for _, r := range []string{"replica-a.log", "replica-b.log"} {
			raw, _ := os.ReadFile(filepath.Join(work, r))
			b.WriteString("\n--- " + r + ":\n" + string(raw))
		}
		return b.String()
	}
	if err != nil {
		t.Fatalf("the quick start failed (%v):\n%s%s", err, out.String(), logs())
	}
	// Both replicas ready, the grant recorded, and one answer of the demo page per replica.
	got := out.String()
	t.Logf("the quick start's output:\n%s", got)
	if strings.Count(got, `"status":"ready"`) != 2 || !strings.Contains(got, "profile internal-agent") ||
		strings.Count(got, `"auditId":"inv_`) != 2 || strings.Count(got, "Welcome") < 2 {
		t.Fatalf("the quick start's output lacks two ready replicas, the grant or two answers:\n%s%s", got, logs())
	}
	for _, r := range []string{"replica-a.log", "replica-b.log"} {
		raw, _ := os.ReadFile(filepath.Join(work, r))
		if !strings.Contains(string(raw), `"tls":true`) || !strings.Contains(string(raw), `"console":"https://`) {
			t.Fatalf("%s does not show a TLS start with the console's URL:\n%s", r, raw)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// stopGroup ends the script's process group (its background replicas): SIGTERM, then after
// 10 s SIGKILL.
func stopGroup(t *testing.T, pgid int) {
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil {
		return // already gone
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if syscall.Kill(-pgid, 0) != nil {
			return
		}
		time.Sleep(50 * time.Millisecond) // polling for the group's end
	}
	t.Logf("the quick start's processes outlived SIGTERM by 10 s: killed")
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// writeTestCertificate writes tls.crt and tls.key into dir: a self-signed P-256 certificate
// for 127.0.0.1, valid for an hour.
func writeTestCertificate(t *testing.T, dir string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "xema"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{"tls.crt": {Type: "CERTIFICATE", Bytes: der}, "tls.key": {Type: "PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// needHydra skips the test (what) when hydra cannot be built here, saying so; with
// XEMA_TEST_REQUIRE_HYDRA=1 (.ci/run sets it, having built hydra) it fails instead.
func needHydra(t *testing.T, what string) {
	t.Helper()
	if _, err := hydratest.BuildBinary(t.Logf); err != nil {
		if os.Getenv("XEMA_TEST_REQUIRE_HYDRA") == "1" {
			t.Fatalf("no hydra (XEMA_TEST_REQUIRE_HYDRA=1): %s cannot run: %v", what, err)
		}
		t.Skipf("SKIP: no hydra (%v): %s did not run", err, what)
	}
}
