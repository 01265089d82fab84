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
	"path/filepath"
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
