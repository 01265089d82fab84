package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
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

// quickStartBlock returns the block of docs/operations.md marked <!-- quickstart:NAME ... -->.
func quickStartBlock(t *testing.T, name string) string {
	t.Helper()
	return docBlock(t, "operations.md", "quickstart:"+name)
}

// TestProductionQuickStart runs the production quick start of docs/operations.md as written,
// in bash: xema dev issuer as the issuer, a PostgreSQL database of the test's own cluster, a
// TLS certificate generated here, two replicas on the database, /readyz on both, the demo
// biome granted by an org administrator through one, and an agent's first call through each.
// The inputs the doc's first block names are the ones set here. Then every process it started
// is stopped and it runs again in a fresh shell (a reboot, a rerun): the master key and the
// keyring are kept and the store opens; the doc's step 2 of before (a master key written
// again) is what stops a replica, naming the file and what to do.
func TestProductionQuickStart(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "base64", "head", "grep"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the quick start needs %s: %v", tool, err)
		}
	}
	inputs := map[string]string{
		"XEMA_STORE":  testpg.NewDatabase(t),
		"ISSUER_ADDR": "127.0.0.1:" + itoa(testnet.FreePort(t)),
		"REPLICA_A":   "127.0.0.1:" + itoa(testnet.FreePort(t)),
		"REPLICA_B":   "127.0.0.1:" + itoa(testnet.FreePort(t)),
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
	script := quickStartBlock(t, "run")
	bin := t.TempDir() // xema on the PATH, as the doc assumes, whatever the built binary's name
	if err := os.Symlink(xemaBinary(t), filepath.Join(bin, "xema")); err != nil {
		t.Fatal(err)
	}
	logs := func() string {
		var b strings.Builder
		for _, r := range []string{"issuer.log", "replica-a.log", "replica-b.log"} {
			raw, _ := os.ReadFile(filepath.Join(work, r))
			b.WriteString("\n--- " + r + ":\n" + string(raw))
		}
		return b.String()
	}
	// run runs script in a fresh bash with only the inputs set, then stops every process it
	// started (its group), returning what it printed.
	run := func(what, script string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		for k, v := range inputs {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		// The processes the script starts in the background share its process group: ended with it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var out testnet.Output
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		stopGroup(t, cmd.Process.Pid)
		t.Logf("the quick start's %s output:\n%s", what, out.String())
		return out.String(), err
	}
	check := func(what, got string) {
		t.Helper()
		if strings.Count(got, `"status":"ready"`) != 2 || strings.Count(got, `"auditId":"inv_`) != 2 || strings.Count(got, "Welcome") < 2 {
			t.Fatalf("the quick start's %s run lacks two ready replicas or two answers:\n%s%s", what, got, logs())
		}
		for _, r := range []string{"replica-a.log", "replica-b.log"} {
			raw, _ := os.ReadFile(filepath.Join(work, r))
			if !strings.Contains(string(raw), `"tls":true`) || !strings.Contains(string(raw), `"console":"https://`) {
				t.Fatalf("%s does not show a TLS start with the console's URL:\n%s", r, raw)
			}
		}
	}

	got, err := run("first", script)
	if err != nil {
		t.Fatalf("the quick start failed (%v):\n%s%s", err, got, logs())
	}
	check("first", got)
	if !strings.Contains(got, "profile internal-agent") {
		t.Fatalf("the first run recorded no grant:\n%s", got)
	}
	keys := map[string][]byte{}
	for _, f := range []string{"master.key", "secret.key", filepath.Join("issuer", "issuer", "signing-key.pem")} {
		keys[f], _ = os.ReadFile(filepath.Join(work, f))
	}

	// Again, from a fresh shell: the same keys, the grant found, both replicas serving.
	got, err = run("second", script)
	if err != nil {
		t.Fatalf("the quick start's second run failed (%v):\n%s%s", err, got, logs())
	}
	check("second", got)
	if strings.Contains(got, "profile internal-agent") {
		t.Fatalf("the second run recorded a second grant:\n%s", got)
	}
	for f, before := range keys {
		if after, _ := os.ReadFile(filepath.Join(work, f)); len(before) == 0 || string(after) != string(before) {
			t.Fatalf("the rerun changed %s", f)
		}
	}
	// Both replicas sealed with the shared keyring, found through the config: neither made one
	// of its own in its data dir (which the other could not open).
	for _, r := range []string{"replica-a", "replica-b"} {
		if _, err := os.Stat(filepath.Join(work, r, "secret.key")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s keeps a keyring of its own (%v): the shared one was not found", r, err)
		}
	}

	// What a rerun that writes the master key again meets: the replica stops, naming the file
	// and what to do.
	master := filepath.Join(work, "master.key")
	if err := os.Rename(master, master+".kept"); err != nil {
		t.Fatal(err)
	}
	overwrite := `xema dev issuer --addr "$ISSUER_ADDR" --data-dir issuer > issuer.log 2>&1 &
curl -fsS --retry 30 --retry-all-errors --retry-delay 1 "http://$ISSUER_ADDR/.well-known/openid-configuration" > /dev/null
umask 077
printf 'm1=%s\n' "$(head -c32 /dev/urandom | base64)" > master.key
xema serve --config xema.yaml --addr "$REPLICA_A" --data-dir replica-a`
	got, err = run("overwritten master key", overwrite)
	if err == nil || !strings.Contains(got, `wrapped under master key "m1", which does not open it (configured: "m1" from master.key)`) ||
		!strings.Contains(got, `master.key holds a key named "m1", but not the one that wrapped it (was it generated again?): put back the deployment's master key`) {
		t.Fatalf("a replica under a master key written again: %v\n%s", err, got)
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
