package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestHelpShowsBooleanFlagsBare: no command's help writes pflag's "[=true|false]" after a
// boolean flag, and the flags keep their usage and defaults.
func TestHelpShowsBooleanFlagsBare(t *testing.T) {
	var walk func(c *cobra.Command)
	seen := 0
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		path := strings.Fields(c.CommandPath())[1:]
		out, code := xema(t, append(path, "--help")...)
		if code != 0 || !strings.Contains(out, "-h, --help ") {
			t.Errorf("xema %s --help: exit %d, no -h, --help line:\n%s", strings.Join(path, " "), code, out)
		}
		if strings.Contains(out, "[=true|false]") {
			t.Errorf("xema %s --help shows [=true|false]:\n%s", strings.Join(path, " "), out)
		}
		seen++
	}
	walk(newRootCmd())
	if seen < 40 {
		t.Fatalf("walked %d commands: the tree is missing", seen)
	}
	out, _ := xema(t, "grant", "change", "--help")
	if !strings.Contains(out, "--yes ") || !strings.Contains(out, `--since string`) {
		t.Fatalf("grant change --help lost its flags:\n%s", out)
	}
}

// TestServerAndTokenFromEnvironment: XEMA_SERVER and XEMA_TOKEN stand in for --server and
// --token, the flags win over them, and without either the error names both.
func TestServerAndTokenFromEnvironment(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"grants":[]}`))
	}))
	defer srv.Close()
	t.Setenv(envServer, srv.URL)
	t.Setenv(envToken, "from-env")
	if out, code := xema(t, "grant", "list", "--format", "json"); code != 0 {
		t.Fatalf("grant list with XEMA_SERVER and XEMA_TOKEN: exit %d\n%s", code, out)
	}
	if out, code := xema(t, "grant", "list", "--format", "json", "--token", "from-flag"); code != 0 {
		t.Fatalf("grant list --token: exit %d\n%s", code, out)
	}
	if len(got) != 2 || got[0] != "Bearer from-env" || got[1] != "Bearer from-flag" {
		t.Fatalf("the gateway saw %q, want the environment's token, then the flag's", got)
	}
	t.Setenv(envToken, "")
	out, code := xema(t, "grant", "list")
	if code != 2 || !strings.Contains(out, "--token (or XEMA_TOKEN) is required") || len(got) != 2 {
		t.Fatalf("grant list without a token: exit %d after %d requests:\n%s", code, len(got), out)
	}
}

// TestMakeRunAddr: `make run ADDR=...` serves on that address (README), the default staying
// 127.0.0.1:8181. make -n prints the command without building or serving.
func TestMakeRunAddr(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("SKIP: no make: %v", err)
	}
	for addr, want := range map[string]string{"": "--addr 127.0.0.1:8181 ", "ADDR=0.0.0.0:9000": "--addr 0.0.0.0:9000 "} {
		args := []string{"-n", "-C", "../..", "run"}
		if addr != "" {
			args = append(args, addr)
		}
		out, err := exec.Command("make", args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "serve "+want) {
			t.Errorf("make %s: %v, want serve %s in:\n%s", strings.Join(args, " "), err, want, out)
		}
	}
}

// TestMakeRunImage: `make run-image` runs the image as docs/operations.md does: containers.conf
// (podman on hosts like the development VM needs it), the root read-only, biomes/ mounted
// read-only, data in the volume xema-data, on ADDR.
func TestMakeRunImage(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("SKIP: no make: %v", err)
	}
	cmd := exec.Command("make", "-n", "-C", "../..", "run-image", "IMAGE=xema:t", "ADDR=127.0.0.1:9999")
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF=")
	out, err := cmd.CombinedOutput()
	for _, want := range []string{"deploy/image/build.sh xema:t", "deploy/image/containers.conf podman run", "--read-only --read-only-tmpfs=false",
		"-p 127.0.0.1:9999:8181", "-v xema-data:/data", "biomes:/biomes:ro xema:t", "--biomes /biomes --dev-grant demo"} {
		if err != nil || !strings.Contains(string(out), want) {
			t.Fatalf("make -n run-image: %v; want %q in:\n%s", err, want, out)
		}
	}
}
