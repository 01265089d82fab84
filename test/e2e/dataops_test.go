package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/testnet"
	"github.com/xemahq/xema/internal/testpg"
)

// someCalls makes n allowed calls and one denied one.
func someCalls(t *testing.T, g *gateway, n int) {
	t.Helper()
	agent := g.token("--subject", "agent:support-bot", "--env", "project")
	for range n {
		expect(t, g.post("/v1/capabilities/invoke", agent, `{"ref":"kb:page.read@1","input":{"pageId":"welcome"}}`), http.StatusOK)
	}
	public := g.token("--subject", "agent:support-bot", "--env", "public-session")
	expect(t, g.post("/v1/capabilities/invoke", public, `{"ref":"workflow:run.start@1","input":{"workflowId":"onboarding"}}`), http.StatusForbidden)
}

// tamperLive alters one stored audit record around the append-only triggers, as someone
// with write access to the database could.
func tamperLive(t *testing.T, g *gateway) {
	t.Helper()
	db := rawDB(t, g)
	stmts := []string{`DROP TRIGGER audit_log_no_update`}
	if g.Store != "" {
		stmts = []string{`ALTER TABLE audit_log DISABLE TRIGGER audit_log_no_update_delete`}
	}
	stmts = append(stmts, `UPDATE audit_log SET decision = 'allowed' WHERE id = (SELECT id FROM audit_log WHERE decision = 'denied' ORDER BY time DESC LIMIT 1)`)
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestAuditPruneArchiveVerify: on both engines, a prune while the gateway serves archives and
// removes the records before its boundary; the live log still verifies (from the
// checkpoints), the archive verifies alone; an altered archive and an altered live record
// are each detected; the CLI refuses bad input and changes nothing.
func TestAuditPruneArchiveVerify(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		someCalls(t, g, 5)
		dir := t.TempDir()
		archive := filepath.Join(dir, "audit.jsonl.gz")
		for _, bad := range [][]string{
			{"audit", "prune"},
			{"audit", "prune", "--before", "yesterday"},
			{"audit", "prune", "--older-than", "90x"},
			{"audit", "prune", "--before", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)},
			{"audit", "prune", "--older-than", "1d", "--batch", "0"},
		} {
			if out, code := g.cli(t, append(bad, g.storeArgs()...)...); code == 0 || !strings.Contains(out, "--") {
				t.Errorf("%v: exit %d, want a usage error naming the flag: %s", bad, code, out)
			}
		}
		boundary := time.Now().UTC().Truncate(time.Second).Add(time.Second)
		waitUntil(t, 3*time.Second, "the boundary to pass", func() bool { return time.Now().After(boundary) })
		out, code := g.cli(t, append([]string{"audit", "prune", "--before", boundary.Format(time.RFC3339), "--archive", archive, "--batch", "3"}, g.storeArgs()...)...)
		if code != 0 || !strings.Contains(out, "pruned") {
			t.Fatalf("prune: exit %d: %s", code, out)
		}
		if out, code := g.cli(t, append([]string{"audit", "prune", "--before", boundary.Format(time.RFC3339), "--archive", archive}, g.storeArgs()...)...); code != 2 {
			t.Errorf("a prune over an existing archive: exit %d, want 2: %s", code, out)
		}
		someCalls(t, g, 2) // the chain goes on after its checkpoint
		out, code = g.cli(t, append([]string{"audit", "verify"}, g.storeArgs()...)...)
		if code != 0 || !strings.Contains(out, "intact") || !strings.Contains(out, "pruned before") {
			t.Fatalf("verify after prune: exit %d: %s", code, out)
		}
		out, code = g.cli(t, append([]string{"audit", "verify", "--archive", archive}, g.storeArgs()...)...)
		if code != 0 || !strings.Contains(out, "intact archive") {
			t.Fatalf("verify the archive: exit %d: %s", code, out)
		}

		// Search and replay say their window reaches pruned records.
		page := g.get("/v1/audit", g.adminToken())
		expect(t, page, http.StatusOK)
		if str(page.Body, "prunedBefore") != boundary.Format(time.RFC3339) {
			t.Errorf("audit search after a prune: prunedBefore %q, want %s", str(page.Body, "prunedBefore"), boundary.Format(time.RFC3339))
		}
		if out, code := g.cli(t, append([]string{"replay", "--since", "1h"}, g.storeArgs()...)...); code != 0 || !strings.Contains(out, "reaches pruned records") {
			t.Errorf("replay over a pruned window: exit %d: %s", code, out)
		}

		// An altered archive.
		lines := readGzipLines(t, archive)
		altered := filepath.Join(dir, "altered.jsonl.gz")
		for i, l := range lines {
			if strings.Contains(l, `"decision":"denied"`) {
				lines[i] = strings.Replace(l, `"decision":"denied"`, `"decision":"allowed"`, 1)
				break
			}
		}
		writeGzipLines(t, altered, lines)
		out, code = g.cli(t, append([]string{"audit", "verify", "--archive", altered}, g.storeArgs()...)...)
		if code != 1 || !strings.Contains(out, "BROKEN") {
			t.Fatalf("an altered archive: exit %d: %s", code, out)
		}
		if out, code := g.cli(t, append([]string{"audit", "verify", "--archive", filepath.Join(dir, "missing")}, g.storeArgs()...)...); code != 2 {
			t.Errorf("a missing archive: exit %d: %s", code, out)
		}

		// An altered live record above the checkpoint.
		tamperLive(t, g)
		out, code = g.cli(t, append([]string{"audit", "verify"}, g.storeArgs()...)...)
		if code != 1 || !strings.Contains(out, "hash mismatch") {
			t.Fatalf("an altered live record: exit %d: %s", code, out)
		}
		// A prune refuses to erase it. The boundary is whole seconds, so it must lie past the
		// second of the altered record, or the prune would have nothing to erase.
		past := time.Now().UTC().Truncate(time.Second).Add(time.Second)
		waitUntil(t, 3*time.Second, "the second boundary to pass", func() bool { return time.Now().After(past) })
		out, code = g.cli(t, append([]string{"audit", "prune", "--before", past.Format(time.RFC3339)}, g.storeArgs()...)...)
		if code == 0 || !strings.Contains(out, "prune refused") {
			t.Fatalf("a prune over an altered record: exit %d: %s", code, out)
		}
	})
}

func readGzipLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

func writeGzipLines(t *testing.T, path string, lines []string) {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	for _, l := range lines {
		fmt.Fprintln(zw, l)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestKeysAtRest: on both engines, the per-deployment keys are stored wrapped by the master
// key; a wrong or missing master key stops the start with a clear error; each key rotates
// with its stated consequence (old cursors stop working, input hashes change, a new chain
// starts and the old ones still verify).
func TestKeysAtRest(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		out, code := g.cli(t, append([]string{"keys", "status"}, g.storeArgs()...)...)
		if code != 0 || strings.Count(out, "\n") != 5 || strings.Contains(out, "raw") { // a header and four keys
			t.Fatalf("keys status: exit %d:\n%s", code, out)
		}
		rows, err := rawDB(t, g).Query(`SELECT name, secret FROM deployment_keys`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var name, secret string
			if err := rows.Scan(&name, &secret); err != nil {
				t.Fatal(err)
			}
			b, _ := base64.StdEncoding.DecodeString(secret)
			if !strings.HasPrefix(string(b), "mk1:") {
				t.Errorf("%s is stored unwrapped", name)
			}
		}
		rows.Close()

		agent := g.token("--subject", "agent:support-bot", "--env", "project")
		first := g.post("/v1/capabilities/search", agent, map[string]any{"limit": 1})
		expect(t, first, http.StatusOK)
		cursor := str(first.Body, "nextCursor")
		input := `{"pageId":"welcome"}`
		hashOf := func() string {
			inv := g.post("/v1/capabilities/invoke", agent, `{"ref":"kb:page.read@1","input":`+input+`}`)
			expect(t, inv, http.StatusOK)
			return str(g.get("/v1/audit/"+str(inv.Body, "auditId"), agent).Body, "inputHash")
		}
		hash1 := hashOf()

		// Wrong, then missing master key: the start stops and says why.
		g.stop()
		wrong := filepath.Join(t.TempDir(), "wrong.key")
		var k [32]byte
		if err := os.WriteFile(wrong, []byte("w1="+base64.StdEncoding.EncodeToString(k[:])+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		serveArgs := append([]string{"serve", "--addr", "127.0.0.1:0"}, g.storeArgs()...)
		if out, err := g.run(append(serveArgs, "--master-key-file", wrong)...); err == nil || !strings.Contains(out, "wrong master key") ||
			!strings.Contains(out, `(configured: "w1" from `+wrong+`)`) || !strings.Contains(out, "a new key cannot open what the old one wrapped") {
			t.Fatalf("a wrong master key: %v\n%s", err, out)
		}
		masterFile := filepath.Join(g.DataDir, "master.key")
		if err := os.Rename(masterFile, masterFile+".away"); err != nil {
			t.Fatal(err)
		}
		if out, err := g.run(append([]string{"audit", "verify"}, g.storeArgs()...)...); err == nil || !strings.Contains(out, "no master key") {
			t.Fatalf("a command without the master key: %v\n%s", err, out)
		}
		// keys status lists without the master key, and says it checked nothing.
		if out, code := g.cli(t, append([]string{"keys", "status"}, g.storeArgs()...)...); code != 0 || strings.Count(out, "not checked (no master key)") != 4 {
			t.Fatalf("keys status without the master key: exit %d:\n%s", code, out)
		}
		// The start stops naming the file, and generates no key that would open nothing.
		if out, err := g.run(serveArgs...); err == nil || !strings.Contains(out, "no master key") || !strings.Contains(out, masterFile) {
			t.Fatalf("a missing master key: %v\n%s", err, out)
		}
		if _, err := os.Stat(masterFile); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a start without the master key left %s: %v", masterFile, err)
		}
		if err := os.Rename(masterFile+".away", masterFile); err != nil {
			t.Fatal(err)
		}

		// Rotation of each key, each with its consequence.
		if out, code := g.cli(t, append([]string{"keys", "rotate", "master"}, g.storeArgs()...)...); code != 2 {
			t.Errorf("rotate an unknown key: exit %d: %s", code, out)
		}
		for _, name := range []string{"search-cursor", "audit-input-hash", "audit-chain"} {
			out, code := g.cli(t, append([]string{"keys", "rotate", name}, g.storeArgs()...)...)
			if code != 0 || !strings.Contains(out, "rotated "+name) {
				t.Fatalf("rotate %s: exit %d: %s", name, code, out)
			}
		}
		g.cmd = nil
		g.start()
		agent = g.token("--subject", "agent:support-bot", "--env", "project")
		if r := g.post("/v1/capabilities/search", agent, map[string]any{"limit": 1, "cursor": cursor}); r.Status != http.StatusBadRequest || str(r.Body, "code") != "INVALID_CURSOR" {
			t.Errorf("a cursor of the rotated key: %d %s, want 400 INVALID_CURSOR", r.Status, r.Raw)
		}
		if hash2 := hashOf(); hash2 == hash1 || hash2 == "" {
			t.Errorf("the input hash after rotating its key: %q, want other than %q", hash2, hash1)
		}
		out, code = g.cli(t, append([]string{"audit", "verify"}, g.storeArgs()...)...)
		if code != 0 || !strings.Contains(out, "intact: 2 chain(s)") {
			t.Fatalf("verify across a chain key rotation: exit %d: %s", code, out)
		}
	})
}

// TestKeysMigrateRaw: a key stored raw (by a version before wrapping, or by someone with
// write access to the database) stops the start, naming the step that takes it; after
// 'xema keys adopt-raw --yes' (audited) it keeps its value: an input hash under the raw key
// matches.
func TestKeysMigrateRaw(t *testing.T) {
	g := &gateway{t: t, bin: xemaBinary(t), DataDir: t.TempDir(), logs: &testnet.Output{}}
	if out, err := g.run("migrate", "--data-dir", g.DataDir); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	raw := bytes.Repeat([]byte{42}, 32)
	if _, err := rawDB(t, g).Exec(`INSERT INTO deployment_keys (name, secret, created_at) VALUES ('audit-input-hash', ?, 0)`,
		base64.StdEncoding.EncodeToString(raw)); err != nil {
		t.Fatal(err)
	}
	var mk [32]byte
	mk[0] = 1
	if err := os.WriteFile(filepath.Join(g.DataDir, "master.key"), []byte("m1="+base64.StdEncoding.EncodeToString(mk[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := g.run("serve", "--addr", "127.0.0.1:0", "--data-dir", g.DataDir); err == nil || !strings.Contains(out, "xema keys adopt-raw") {
		t.Fatalf("a start with a raw key: %v\n%s", err, out)
	}
	if out, code := g.cli(t, "keys", "status", "--data-dir", g.DataDir); code != 1 || !strings.Contains(out, "NOT AUTHENTICATED: deployment key audit-input-hash") {
		t.Fatalf("keys status with a raw key: exit %d:\n%s", code, out)
	}
	if out, code := g.cli(t, "keys", "adopt-raw", "--data-dir", g.DataDir); code != 0 || !strings.Contains(out, "stored raw: audit-input-hash") {
		t.Fatalf("adopt-raw without --yes: exit %d:\n%s", code, out)
	}
	if out, code := g.cli(t, "keys", "adopt-raw", "--yes", "--data-dir", g.DataDir); code != 0 || !strings.Contains(out, "adopted audit-input-hash") {
		t.Fatalf("adopt-raw --yes: exit %d:\n%s", code, out)
	}
	g.start()
	out, code := g.cli(t, "keys", "status", "--data-dir", g.DataDir)
	if code != 0 || strings.Contains(out, "raw") {
		t.Fatalf("keys status after the start: exit %d:\n%s", code, out)
	}
	agent := g.token("--subject", "agent:support-bot", "--env", "project")
	input := `{"pageId":"welcome"}`
	inv := g.post("/v1/capabilities/invoke", agent, `{"ref":"kb:page.read@1","input":`+input+`}`)
	expect(t, inv, http.StatusOK)
	mac := hmac.New(sha256.New, raw)
	mac.Write([]byte(input))
	if got := str(g.get("/v1/audit/"+str(inv.Body, "auditId"), agent).Body, "inputHash"); got != "hmac-sha256:"+hex.EncodeToString(mac.Sum(nil)) {
		t.Fatalf("input hash %s: not under the migrated key", got)
	}
}

// TestBackupRestoreUnderLoad: a backup taken while calls are served restores into a fresh
// data directory (SQLite: xema backup/restore) or database (PostgreSQL: pg_dump/pg_restore),
// whose audit log verifies intact and whose gateway serves a call.
func TestBackupRestoreUnderLoad(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		agent := g.token("--subject", "agent:support-bot", "--env", "project")
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var served, failed atomic.Int64
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					body := `{"ref":"kb:page.read@1","input":{"pageId":"welcome"}}`
					req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/capabilities/invoke", strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+agent)
					req.Header.Set("Content-Type", "application/json")
					resp, err := http.DefaultClient.Do(req)
					switch {
					case err == nil && resp.StatusCode == http.StatusOK:
						served.Add(1)
					case err == nil && resp.StatusCode == http.StatusTooManyRequests: // the demo's rate limit, answered and audited
					default:
						failed.Add(1)
					}
					if resp != nil {
						resp.Body.Close()
					}
				}
			}()
		}
		waitUntil(t, 10*time.Second, "calls under way", func() bool { return served.Load() > 20 })
		restored := &gateway{t: t, bin: g.bin, DataDir: t.TempDir(), logs: &testnet.Output{}}
		if e.name == "sqlite" {
			backup := filepath.Join(t.TempDir(), "xema-backup.db")
			if out, code := g.cli(t, "backup", "--data-dir", g.DataDir, "--to", backup); code != 0 {
				t.Fatalf("backup: exit %d: %s", code, out)
			}
			if out, code := g.cli(t, "backup", "--data-dir", g.DataDir, "--to", backup); code == 0 {
				t.Errorf("a backup over an existing file: %s", out)
			}
			if out, code := g.cli(t, "restore", "--from", backup, "--data-dir", g.DataDir); code != 2 {
				t.Errorf("a restore over a live store: exit %d: %s", code, out)
			}
			if out, code := g.cli(t, "restore", "--from", filepath.Join(g.DataDir, "master.key"), "--data-dir", restored.DataDir); code != 2 {
				t.Errorf("a restore of a file that is no backup: exit %d: %s", code, out)
			}
			if out, code := g.cli(t, "restore", "--from", backup, "--data-dir", restored.DataDir); code != 0 {
				t.Fatalf("restore: exit %d: %s", code, out)
			}
		} else {
			if out, code := g.cli(t, "backup", "--store", g.Store, "--to", filepath.Join(t.TempDir(), "x")); code != 2 || !strings.Contains(out, "pg_dump") {
				t.Errorf("xema backup of PostgreSQL: exit %d: %s", code, out)
			}
			dump := filepath.Join(t.TempDir(), "xema.dump")
			pgTool(t, "pg_dump", "--format=custom", "--file", dump, g.Store)
			restored.Store = testpg.NewDatabase(t)
			pgTool(t, "pg_restore", "--no-owner", "--exit-on-error", "--dbname", restored.Store, dump)
		}
		stop()
		wg.Wait()
		if served.Load() == 0 || failed.Load() > 0 {
			t.Fatalf("under load: %d served, %d failed", served.Load(), failed.Load())
		}
		// The keys: the master key (and the credential keyring it wraps) travel apart from the backup.
		for _, name := range []string{"master.key", "secret.key"} {
			b, err := os.ReadFile(filepath.Join(g.DataDir, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(restored.DataDir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		out, code := restored.cli(t, append([]string{"audit", "verify"}, restored.storeArgs()...)...)
		if code != 0 || !strings.Contains(out, "intact") {
			t.Fatalf("verify the restored store: exit %d: %s", code, out)
		}
		restored.start()
		agent = restored.token("--subject", "agent:support-bot", "--env", "project")
		// Another capability than the load's: the restored counters may hold kb:page.read@1 at
		// its rate limit, as the load left it.
		expect(t, restored.post("/v1/capabilities/invoke", agent, `{"ref":"workflow:run.start@1","input":{"workflowId":"onboarding"}}`), http.StatusOK)
	})
}

// pgTool runs a PostgreSQL client tool (pg_dump, pg_restore) from PATH or the newest
// /usr/lib/postgresql/*/bin.
func pgTool(t *testing.T, name string, args ...string) {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
		if len(found) == 0 {
			t.Fatalf("%s: not on PATH nor in /usr/lib/postgresql/*/bin", name)
		}
		bin = found[len(found)-1]
	}
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
}
