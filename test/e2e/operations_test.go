package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/testnet"
)

// TestVersion: `xema version`, `xema --version` and MCP's serverInfo name the same build.
func TestVersion(t *testing.T) {
	g := startGateway(t, "")
	line, err := g.run("version")
	if err != nil || !strings.HasPrefix(line, "xema ") {
		t.Fatalf("xema version: %v %q", err, line)
	}
	flag, err := g.run("--version")
	if err != nil || flag != line {
		t.Errorf("xema --version %q, want %q", flag, line)
	}
	js, err := g.run("version", "--format", "json")
	if err != nil || !strings.Contains(js, `"version":`) || !strings.Contains(js, `"goVersion":`) {
		t.Errorf("xema version --format json: %v %s", err, js)
	}
	s, err := mcpSession(t, g, g.token("--subject", "agent:support-bot", "--env", "project"))
	if err != nil {
		t.Fatal(err)
	}
	info := s.InitializeResult().ServerInfo
	if info.Name != "xema" || info.Version == "" || info.Version == "dev" || !strings.HasPrefix(line, "xema "+strings.SplitN(info.Version, "+", 2)[0]) {
		t.Errorf("MCP serverInfo %+v, version line %q", info, line)
	}
}

// TestConfigFile: a --config file sets serve flags with ${ENV} expansion; flags override it.
func TestConfigFile(t *testing.T) {
	t.Setenv("XEMA_E2E_ORIGIN", "https://from-env.example")
	cfg := filepath.Join(t.TempDir(), "xema.yaml")
	body := "cors-origin:\n  - ${XEMA_E2E_ORIGIN}\n  - https://second.example\nlog-level: debug\nmax-inflight-calls: 3\npublic-url: https://file.example\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "", "--config", cfg, "--public-url", "https://flag.example")
	for origin, granted := range map[string]bool{"https://from-env.example": true, "https://second.example": true, "https://other.example": false} {
		req, _ := http.NewRequest(http.MethodOptions, g.URL+"/mcp", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		if got := g.do(req).Header.Get("Access-Control-Allow-Origin") == origin; got != granted {
			t.Errorf("origin %s granted %v, want %v", origin, got, granted)
		}
	}
	r := g.get("/.well-known/oauth-protected-resource", "")
	if str(r.Body, "resource") != "https://flag.example" {
		t.Errorf("the --public-url flag did not override the file: %s", r.Raw)
	}

	// A broken config is refused before the gateway starts (exit 2).
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(bad, []byte("store: ${XEMA_E2E_SURELY_UNSET}\n"), 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, g.bin, "serve", "--config", bad, "--data-dir", t.TempDir()).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "XEMA_E2E_SURELY_UNSET") {
		t.Errorf("bad config: %v %s", err, out)
	}
}

// TestTLS: --tls-cert/--tls-key serve HTTPS.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	port := testnet.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	logs := &testnet.Output{}
	cmd := exec.Command(xemaBinary(t), "serve", "--addr", addr, "--data-dir", t.TempDir(), "--tls-cert", certFile, "--tls-key", keyFile)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	var resp *http.Response
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err = client.Get("https://" + addr + "/readyz"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("no HTTPS answer: %v\n%s", err, logs.String())
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Fatalf("readyz over TLS: %d", resp.StatusCode)
	}
	if plain, err := http.Get("http://" + addr + "/readyz"); err == nil {
		plain.Body.Close()
		if plain.StatusCode == http.StatusOK {
			t.Error("plain HTTP answered 200 on the TLS listener")
		}
	}
}

func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "xema-e2e"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestKernelBiomeVersionStable: restarts of one binary publish the built-in biome (xema)
// once: every start finds the version it published before, whatever order the packages
// registered their capabilities in.
func TestKernelBiomeVersionStable(t *testing.T) {
	g := startGateway(t, "")
	for range 3 {
		g.stop()
		g.cmd = nil
		g.start()
	}
	g.stop()
	rows, err := rawDB(t, g).Query(`SELECT version FROM biome_versions WHERE id = 'xema'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var versions []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	if rows.Err() != nil || len(versions) != 1 {
		t.Fatalf("four starts stored the built-in biome as %v (%v), want one version", versions, rows.Err())
	}
}
