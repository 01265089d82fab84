// Package opatest builds the stock `opa` command of the OPA version in go.mod, for tests
// that check a stock OPA decides as the gateway does. It is built once and cached.
package opatest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Module is the OPA module; it is a tool dependency in go.mod, so it builds offline.
const Module = "github.com/open-policy-agent/opa"

var (
	once sync.Once
	path string
	err  error
)

// Binary returns the cached opa binary, building it on first use ($XDG_CACHE_HOME/xema, else
// a directory under the system temp dir). A failed build fails the test: never a skip.
func Binary(tb testing.TB) string {
	tb.Helper()
	once.Do(func() { path, err = build() })
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

func build() (string, error) {
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..", "..")
	list := exec.Command("go", "list", "-m", "-f", "{{.Version}}", Module)
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", Module, err)
	}
	dir := os.Getenv("XDG_CACHE_HOME")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "xema-cache")
	} else {
		dir = filepath.Join(dir, "xema")
	}
	bin := filepath.Join(dir, "opa-"+strings.TrimSpace(string(out)))
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	b := exec.Command("go", "build", "-o", tmp, Module)
	b.Dir = root
	if out, err := b.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build opa: %v\n%s", err, out)
	}
	return bin, os.Rename(tmp, bin)
}
