package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	npmOnce sync.Once
	npmDir  string
	npmErr  error
)

// npmPeers installs the npm peers pinned by test/peers/package-lock.json (server-everything,
// telegram-test-api) with `npm ci`, once, into a cache directory named for the lock file's
// hash, and returns that directory (its node_modules holds them).
func npmPeers(t testing.TB) string {
	t.Helper()
	npmOnce.Do(func() {
		src := filepath.Join(repoRoot(t), "test", "peers")
		lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
		if err != nil {
			npmErr = err
			return
		}
		manifest, err := os.ReadFile(filepath.Join(src, "package.json"))
		if err != nil {
			npmErr = err
			return
		}
		sum := sha256.Sum256(append(manifest, lock...))
		npmDir = filepath.Join(cacheDir(t), "npm-peers-"+hex.EncodeToString(sum[:6]))
		if _, err := os.Stat(filepath.Join(npmDir, "node_modules", ".package-lock.json")); err == nil {
			return
		}
		if err := os.MkdirAll(npmDir, 0o755); err != nil {
			npmErr = err
			return
		}
		for name, b := range map[string][]byte{"package.json": manifest, "package-lock.json": lock} {
			if err := os.WriteFile(filepath.Join(npmDir, name), b, 0o644); err != nil {
				npmErr = err
				return
			}
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = npmDir
		if out, err := cmd.CombinedOutput(); err != nil {
			npmErr = fmt.Errorf("npm ci in %s: %v\n%s", npmDir, err, tail(string(out), 2000))
		}
	})
	if npmErr != nil {
		t.Fatal(npmErr)
	}
	return npmDir
}
