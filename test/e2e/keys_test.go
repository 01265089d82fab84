package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx database/sql driver, for store checks
	_ "modernc.org/sqlite"             // the sqlite database/sql driver, for store checks
)

// rawDB opens the gateway's store for checks of what is stored (never for writes the
// gateway would make).
func rawDB(t testing.TB, g *gateway) *sql.DB {
	t.Helper()
	driver, dsn := "sqlite", "file:"+filepath.Join(g.DataDir, "xema.db")+"?_busy_timeout=10000"
	if g.Store != "" {
		driver, dsn = "pgx", g.Store
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// reseal recomputes a cursor's MAC over body with key: what an attacker can do when the
// key is known (it was empty).
func reseal(key, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	return base64.RawURLEncoding.EncodeToString(append(mac.Sum(nil), body...))
}

func cursorBodyOf(t testing.TB, cursor string) []byte {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(raw) <= sha256.Size {
		t.Fatalf("cursor %q is not MAC+body", cursor)
	}
	return raw[sha256.Size:]
}

func TestKeysCursorsAndInputHashesArePerDeployment(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		agent := g.token("--subject", "agent:support-bot", "--env", "project")

		first := g.post("/v1/capabilities/search", agent, map[string]any{"limit": 1})
		expect(t, first, http.StatusOK)
		cursor := str(first.Body, "nextCursor")
		if cursor == "" {
			t.Fatalf("no nextCursor: %s", first.Raw)
		}
		body := cursorBodyOf(t, cursor)
		var cb map[string]any
		if err := json.Unmarshal(body, &cb); err != nil {
			t.Fatal(err)
		}
		cb["o"] = 3
		skip, _ := json.Marshal(cb)
		for name, forged := range map[string]string{
			"same body, empty key":      reseal(nil, body),
			"other offset, empty key":   reseal(nil, skip),
			"other offset, guessed key": reseal([]byte("xema"), skip),
		} {
			r := g.post("/v1/capabilities/search", agent, map[string]any{"limit": 1, "cursor": forged})
			if r.Status != http.StatusBadRequest || str(r.Body, "code") != "INVALID_CURSOR" {
				t.Errorf("%s: %d %s, want 400 INVALID_CURSOR", name, r.Status, r.Raw)
			}
		}

		// The keys are in the store, one row each, generated at first start.
		db := rawDB(t, g)
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM deployment_keys WHERE name IN ('search-cursor', 'audit-input-hash')`).Scan(&n); err != nil || n != 2 {
			t.Fatalf("deployment_keys rows: %d, %v; want 2", n, err)
		}

		// Input hashes are keyed: not the sha256 of the input anyone could recompute.
		input := `{"pageId":"welcome"}`
		inv := g.post("/v1/capabilities/invoke", agent, `{"ref":"kb:page.read@1","input":`+input+`}`)
		expect(t, inv, http.StatusOK)
		rec := g.get("/v1/audit/"+str(inv.Body, "auditId"), agent)
		sum := sha256.Sum256([]byte(input))
		if h := str(rec.Body, "inputHash"); !strings.HasPrefix(h, "hmac-sha256:") || strings.Contains(h, hex.EncodeToString(sum[:])) {
			t.Errorf("inputHash %q, want a keyed hmac-sha256", h)
		}

		// A restart loads the same keys: the cursor issued before still pages.
		g.stop()
		g.cmd = nil
		g.start()
		agent = g.token("--subject", "agent:support-bot", "--env", "project")
		if r := g.post("/v1/capabilities/search", agent, map[string]any{"limit": 1, "cursor": cursor}); r.Status != http.StatusOK {
			t.Errorf("the cursor of the previous start: %d %s, want 200 (the key is kept in the store)", r.Status, r.Raw)
		}
		inv2 := g.post("/v1/capabilities/invoke", agent, `{"ref":"kb:page.read@1","input":`+input+`}`)
		rec2 := g.get("/v1/audit/"+str(inv2.Body, "auditId"), agent)
		if str(rec2.Body, "inputHash") != str(rec.Body, "inputHash") {
			t.Errorf("the input hash key changed across a restart: %s vs %s", str(rec2.Body, "inputHash"), str(rec.Body, "inputHash"))
		}
	})
}

// Replicas on one PostgreSQL share the keys: a cursor of one pages on the other.
func TestKeysSharedByReplicas(t *testing.T) {
	gws := startReplicas(t, engines[1].store(t), 2)
	agent := gws[0].token("--subject", "agent:support-bot", "--env", "project")
	first := gws[0].post("/v1/capabilities/search", agent, map[string]any{"limit": 1})
	expect(t, first, http.StatusOK)
	r := gws[1].post("/v1/capabilities/search", agent, map[string]any{"limit": 1, "cursor": str(first.Body, "nextCursor")})
	expect(t, r, http.StatusOK)
}

func TestKeysMaxTokenTTL(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t), "--max-token-ttl", "1h")
		long := g.token("--subject", "agent:support-bot", "--env", "project", "--ttl", "2h")
		short := g.token("--subject", "agent:support-bot", "--env", "project", "--ttl", "30m")
		req := `{"ref":"kb:page.read@1","input":{"pageId":"welcome"}}`
		r := g.post("/v1/capabilities/invoke", long, req)
		expect(t, r, http.StatusUnauthorized)
		if str(r.Body, "code") != "UNAUTHENTICATED" || !strings.Contains(str(r.Body, "message"), "ttl_too_long") {
			t.Errorf("2h token under --max-token-ttl 1h: %s", r.Raw)
		}
		rec := g.get("/v1/audit/"+str(r.Body, "auditId"), g.adminToken())
		expect(t, rec, http.StatusOK)
		if !strings.Contains(string(rec.Raw), "ttl_too_long") {
			t.Errorf("the audit record does not name the reason: %s", rec.Raw)
		}
		expect(t, g.post("/v1/capabilities/invoke", short, req), http.StatusOK)
	})
}

// TestDatabaseOnlyAttacker: on both engines, what someone with write access to the database
// and no master key can do to the audit evidence is caught by the operator's commands: a
// chain key inserted raw makes 'keys status' and 'audit verify' exit 1 naming it, and a chain
// head set back is a break; the untouched log verifies and names the newest record it
// vouches for.
func TestDatabaseOnlyAttacker(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		agent := g.token("--subject", "agent:support-bot", "--env", "project")
		for range 3 {
			expect(t, g.post("/v1/capabilities/invoke", agent, `{"ref":"kb:page.read@1","input":{"pageId":"welcome"}}`), http.StatusOK)
		}
		g.stop()
		verify := append([]string{"audit", "verify"}, g.storeArgs()...)
		if out, code := g.cli(t, verify...); code != 0 || !strings.Contains(out, "newest record vouched for: ") {
			t.Fatalf("verify before: exit %d:\n%s", code, out)
		}
		db := rawDB(t, g)
		created := "0" // SQLite keeps Unix microseconds
		if e.name == "postgres" {
			created = "now()"
		}
		if _, err := db.Exec(`INSERT INTO deployment_keys (name, secret, created_at) VALUES ('audit-chain@1', '` +
			base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)) + `', ` + created + `)`); err != nil {
			t.Fatal(err)
		}
		if out, code := g.cli(t, append([]string{"keys", "status"}, g.storeArgs()...)...); code != 1 || !strings.Contains(out, "NOT AUTHENTICATED: deployment key audit-chain@1") {
			t.Fatalf("keys status with an inserted key: exit %d:\n%s", code, out)
		}
		if out, code := g.cli(t, verify...); code != 1 || !strings.Contains(out, "BROKEN: deployment key audit-chain@1") {
			t.Fatalf("verify with an inserted key: exit %d:\n%s", code, out)
		}
		if _, err := db.Exec(`DELETE FROM deployment_keys WHERE name = 'audit-chain@1'`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`UPDATE audit_chain_heads SET seq = seq - 1, hash = 'hmac-sha256:00' WHERE seq > 1`); err != nil {
			t.Fatal(err)
		}
		if out, code := g.cli(t, verify...); code != 1 || !strings.Contains(out, "head does not verify") {
			t.Fatalf("verify with a head set back: exit %d:\n%s", code, out)
		}
	})
}

// TestKeysMasterKeyRotation follows docs/operations.md's master key rotation with the master
// key in a file of its own, as production keeps it: every keys command takes
// --master-key-file (status included); a rotated chain key is kept under a name carrying its
// retirement time in RFC 3339; a new master key listed first and `keys rewrap` leave each
// key's CREATED as it was, whether status checks it under the master key or lists the store
// without one.
func TestKeysMasterKeyRotation(t *testing.T) {
	mk := filepath.Join(t.TempDir(), "master.key")
	entry := func(kid string, b byte) string {
		var k [32]byte
		k[0] = b
		return kid + "=" + base64.StdEncoding.EncodeToString(k[:]) + "\n"
	}
	if err := os.WriteFile(mk, []byte(entry("m1", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "", "--master-key-file", mk)
	g.stop()
	keys := func(args ...string) string {
		t.Helper()
		out, code := g.cli(t, append(append([]string{"keys"}, args...), "--data-dir", g.DataDir)...)
		if code != 0 {
			t.Fatalf("xema keys %v: exit %d:\n%s", args, code, out)
		}
		return out
	}
	// rows maps each key's name to its WRAPPED BY, CREATED and AUTHENTICATED columns.
	rows := func(out string) map[string][]string {
		m := map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			f := strings.Fields(line)
			m[f[0]] = f[1:]
		}
		return m
	}
	keys("rotate", "audit-chain", "--master-key-file", mk)
	before := rows(keys("status", "--master-key-file", mk))
	var retired string
	for name, r := range before {
		if r[2] != "yes" || r[0] != "m1" {
			t.Fatalf("key %s before the rewrap: %v", name, r)
		}
		if strings.HasPrefix(name, "audit-chain@") {
			retired = name
		}
	}
	if len(before) != 5 || !regexp.MustCompile(`^audit-chain@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$`).MatchString(retired) {
		t.Fatalf("want the four keys and a retired chain key named by its RFC 3339 retirement time: %v", before)
	}

	if err := os.WriteFile(mk, []byte(entry("m2", 2)+entry("m1", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := keys("rewrap", "--master-key-file", mk); !strings.Contains(out, "rewrapped 5 key(s) under master key m2") {
		t.Fatalf("rewrap: %s", out)
	}
	checked, listed := rows(keys("status", "--master-key-file", mk)), rows(keys("status"))
	for name, r := range before {
		if c := checked[name]; len(c) != 3 || c[0] != "m2" || c[1] != r[1] || c[2] != "yes" {
			t.Errorf("%s after the rewrap, checked: %v, want m2, created %s, yes", name, c, r[1])
		}
		if l := listed[name]; len(l) < 2 || l[0] != "m2" || l[1] != r[1] {
			t.Errorf("%s after the rewrap, listed without the master key: %v, want m2, created %s", name, l, r[1])
		}
	}
	// And the gateway starts under the rotated master key, its chains verifying.
	g.cmd = nil
	g.start("--master-key-file", mk)
	g.stop()
	if out, code := g.cli(t, "audit", "verify", "--data-dir", g.DataDir, "--master-key-file", mk); code != 0 || !strings.Contains(out, "intact") {
		t.Fatalf("audit verify after the rotation: exit %d:\n%s", code, out)
	}
}
