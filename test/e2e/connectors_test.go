package e2e

// Connector tests against real peers: a real Gitea 1.26.0 (built from the module proxy's
// source by tools/gitea/build.sh, cached under $XEMA_CACHE_DIR or ~/.cache/xema) for the SCM
// and tracker connectors, and the npm telegram-test-api server for the Telegram connector.
// GitHub, GitLab and Slack cannot run here: their connectors are tested in
// internal/connector/... against servers following each API's documented wire format.

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/testnet"
	"github.com/xemahq/xema/internal/testpg"
)

const (
	refCreatePR = "connector:scm.create-pull-request@1"
	refMerge    = "connector:scm.merge@1"
	refIssue    = "connector:tracker.issue.create@1"
	refSend     = "connector:channel.send-message@1"
)

func cacheDir(t testing.TB) string {
	if d := os.Getenv("XEMA_CACHE_DIR"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(home, ".cache", "xema")
}

// giteaBinary builds Gitea once (about 8 minutes cold) and reuses the cached binary.
func giteaBinary(t testing.TB) (bin, src string) {
	t.Helper()
	cache := filepath.Join(cacheDir(t), "gitea")
	cmd := exec.Command("sh", filepath.Join(repoRoot(t), "tools", "gitea", "build.sh"), cache)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build gitea: %v\n%s", err, tail(stderr.String(), 3000))
	}
	return strings.TrimSpace(string(out)), filepath.Join(cache, "src-v1.26.0")
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// giteaServer is a running Gitea with an admin user, its API token and a repository
// xema/app holding the branches main and feature/x.
type giteaServer struct {
	URL, Token string
}

func startGitea(t *testing.T) *giteaServer {
	t.Helper()
	bin, src := giteaBinary(t)
	dsn, err := url.Parse(testpg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := dsn.User.Password()
	dir := t.TempDir()
	port := testnet.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	ini := filepath.Join(dir, "app.ini")
	conf := fmt.Sprintf(`APP_NAME = xema-test
RUN_MODE = prod
WORK_PATH = %[1]s
[server]
HTTP_ADDR = 127.0.0.1
HTTP_PORT = %[2]d
ROOT_URL = %[3]s/
STATIC_ROOT_PATH = %[4]s
APP_DATA_PATH = %[1]s/data
DISABLE_SSH = true
OFFLINE_MODE = true
[database]
DB_TYPE = postgres
HOST = %[5]s
NAME = %[6]s
USER = %[7]s
PASSWD = %[8]s
SSL_MODE = disable
[repository]
ROOT = %[1]s/repos
DEFAULT_BRANCH = main
[security]
INSTALL_LOCK = true
SECRET_KEY = xema-test-secret-key-not-for-production
[service]
DISABLE_REGISTRATION = true
[indexer]
ISSUE_INDEXER_TYPE = db
[cron]
ENABLED = false
[log]
MODE = console
LEVEL = Warn
`, dir, port, base, src, dsn.Host, strings.TrimPrefix(dsn.Path, "/"), dsn.User.Username(), pw)
	if err := os.WriteFile(ini, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GITEA_WORK_DIR="+dir, "HOME="+dir, "GITEA_I_AM_BEING_UNSAFE_RUNNING_AS_ROOT=true")
	run := func(args ...string) {
		cmd := exec.Command(bin, append(args, "--config", ini)...)
		cmd.Env, cmd.Dir = env, dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gitea %v: %v\n%s", args, err, tail(string(out), 3000))
		}
	}
	run("migrate")
	run("admin", "user", "create", "--admin", "--username", "xema", "--password", "xema-test-pass-1", "--email", "xema@example.com", "--must-change-password=false")

	logs := &bytes.Buffer{}
	web := exec.Command(bin, "web", "--config", ini)
	web.Env, web.Dir, web.Stdout, web.Stderr = env, dir, logs, logs
	if err := web.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = web.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = web.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = web.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("gitea logs:\n%s", tail(logs.String(), 4000))
		}
	})
	waitHTTP(t, base+"/api/v1/version")

	g := &giteaServer{URL: base}
	var tok struct {
		SHA1 string `json:"sha1"`
	}
	giteaCall(t, base, "basic", http.MethodPost, "/api/v1/users/xema/tokens",
		map[string]any{"name": "xema-test", "scopes": []string{"write:repository", "write:issue", "write:user"}}, http.StatusCreated, &tok)
	g.Token = tok.SHA1
	giteaCall(t, base, g.Token, http.MethodPost, "/api/v1/user/repos",
		map[string]any{"name": "app", "auto_init": true, "default_branch": "main"}, http.StatusCreated, nil)
	giteaCall(t, base, g.Token, http.MethodPost, "/api/v1/repos/xema/app/branches",
		map[string]any{"new_branch_name": "feature/x", "old_branch_name": "main"}, http.StatusCreated, nil)
	giteaCall(t, base, g.Token, http.MethodPost, "/api/v1/repos/xema/app/contents/feature.txt",
		map[string]any{"branch": "feature/x", "message": "add feature x", "content": base64.StdEncoding.EncodeToString([]byte("x\n"))},
		http.StatusCreated, nil)
	return g
}

// giteaCall is a direct call to Gitea's API (setting up, and checking what the connector did).
func giteaCall(t testing.TB, base, token, method, path string, body any, want int, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if token == "basic" {
		req.SetBasicAuth("xema", "xema-test-pass-1")
	} else {
		req.Header.Set("Authorization", "token "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("gitea %s %s: %d, want %d: %s", method, path, resp.StatusCode, want, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("gitea %s %s: %v", method, path, err)
		}
	}
}

func waitHTTP(t testing.TB, u string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode < 500 {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not answer in 60s", u)
}

// connectorSetup stores a credential and a binding as an org admin and returns the admin
// token and the binding's id.
func connectorSetup(t *testing.T, g *gateway, admin string, cred map[string]any, bind map[string]any) (credID, bindID string) {
	t.Helper()
	c := g.post("/v1/credentials", admin, cred)
	expect(t, c, http.StatusCreated)
	credID = str(c.Body, "id")
	bind["credentialId"] = credID
	b := g.post("/v1/bindings", admin, bind)
	expect(t, b, http.StatusCreated)
	return credID, str(b.Body, "id")
}

// installConnectors approves the connectors biome for workflow subjects in the project
// environment.
func installConnectors(t *testing.T, g *gateway, admin string) {
	t.Helper()
	r := g.post("/v1/grants", admin, map[string]any{"biomeId": "connectors", "version": "1.0.0",
		"digestHash": g.digestOf(admin, "connectors", "1.0.0"), "profile": "connector-bridge",
		"customize": map[string]any{
			refCreatePR: map[string]any{"environments": []string{"project"}},
			refMerge:    map[string]any{"environments": []string{"project"}},
			refIssue:    map[string]any{"environments": []string{"project"}},
		}})
	expect(t, r, http.StatusCreated)
}

// approveHeld approves a held call as the admin and returns the run's output.
func approveHeld(t *testing.T, g *gateway, admin, caller string, held response) map[string]any {
	t.Helper()
	expect(t, held, http.StatusAccepted)
	id := str(held.Body, "approvalId")
	ok := g.post("/v1/approvals/"+id+"/approve", admin, map[string]any{})
	expect(t, ok, http.StatusOK)
	inv := g.get("/v1/invocations/"+id, caller)
	expect(t, inv, http.StatusOK)
	out, _ := inv.Body["output"].(map[string]any)
	if str(inv.Body, "status") != "done" || out == nil {
		t.Fatalf("invocation after approval: %s", inv.Raw)
	}
	return out
}

// TestConnectorGitea runs the spec's worked example against a real Gitea: a workflow subject
// opens a pull request naming no repository, a person approves, the answer is the
// change-request record; then the merge (also approved), an issue, and the provider errors.
func TestConnectorGitea(t *testing.T) {
	gt := startGitea(t)
	g := startGateway(t, "")
	admin := g.token("--subject", "user:alice", "--org-role", "org_admin", "--env", "org", "--org", "acme")
	wf := g.token("--subject", "workflow:release", "--env", "project", "--org", "acme", "--project", "p1")
	installConnectors(t, g, admin)
	// Approvers are held to the policy of the ref in their own environment: the grant covers
	// the project environment, so the person approving works there.
	approver := g.token("--subject", "user:alice", "--org-role", "org_admin", "--env", "project", "--org", "acme", "--project", "p1")

	// Before any binding: the resolver reports the missing binding, in preflight and invoke.
	miss := g.post("/v1/capabilities/invoke", wf, map[string]any{"ref": refIssue, "input": map[string]any{"title": "t"}})
	if miss.Status != http.StatusBadGateway || str(miss.Body, "code") != "MISSING_BINDING" {
		t.Fatalf("invoke before binding: %d %s", miss.Status, miss.Raw)
	}
	pre := g.post("/v1/capabilities/preflight", wf, map[string]any{"ref": refIssue})
	expect(t, pre, http.StatusOK)
	if pre.Body["ready"] != false {
		t.Fatalf("preflight before binding: %s", pre.Raw)
	}

	credID, _ := connectorSetup(t, g, admin,
		map[string]any{"name": "gitea ci", "provider": "gitea", "secret": gt.Token},
		map[string]any{"project": "p1", "environment": "project", "refPattern": "connector:*", "provider": "gitea",
			"baseUrl": gt.URL, "config": map[string]any{"repository": "xema/app"}})
	pre = g.post("/v1/capabilities/preflight", wf, map[string]any{"ref": refIssue})
	if pre.Body["ready"] != true {
		t.Fatalf("preflight after binding: %s", pre.Raw)
	}

	// The worked example: no repository, no provider in the input.
	input := map[string]any{"sourceBranch": "feature/x", "targetBranch": "main", "title": "Add feature x"}
	held := g.post("/v1/capabilities/invoke", wf, map[string]any{"ref": refCreatePR, "input": input})
	cr := approveHeld(t, g, approver, wf, held)
	for _, k := range []string{"id", "externalId", "sourceBranch", "targetBranch", "title", "status", "createdAt", "updatedAt"} {
		if str(cr, k) == "" {
			t.Fatalf("change-request record lacks %s: %v", k, cr)
		}
	}
	if str(cr, "status") != "open" || str(cr, "sourceBranch") != "feature/x" || str(cr, "targetBranch") != "main" {
		t.Fatalf("change request: %v", cr)
	}
	var pull struct {
		Title string `json:"title"`
		State string `json:"state"`
	}
	giteaCall(t, gt.URL, gt.Token, http.MethodGet, "/api/v1/repos/xema/app/pulls/"+str(cr, "externalId"), nil, http.StatusOK, &pull)
	if pull.Title != "Add feature x" || pull.State != "open" {
		t.Fatalf("gitea has pull %+v", pull)
	}

	// The same PR again: Gitea answers 409, the caller gets CHANGE_REQUEST_EXISTS.
	again := approveRun(t, g, approver, wf, refCreatePR, input)
	if again != "CHANGE_REQUEST_EXISTS" {
		t.Fatalf("second create ended %q", again)
	}
	// A branch Gitea does not have: BRANCH_NOT_FOUND.
	nobranch := approveRun(t, g, approver, wf, refCreatePR, map[string]any{"sourceBranch": "nope", "targetBranch": "main", "title": "x"})
	if nobranch != "BRANCH_NOT_FOUND" {
		t.Fatalf("missing branch ended %q", nobranch)
	}

	// Gitea checks a new PR's mergeability in the background and refuses a merge until it
	// has (CHANGE_REQUEST_NOT_MERGEABLE): wait for the check, bounded.
	waitMergeable(t, gt, str(cr, "externalId"))
	merged := approveHeld(t, g, approver, wf, g.post("/v1/capabilities/invoke", wf,
		map[string]any{"ref": refMerge, "input": map[string]any{"externalId": str(cr, "externalId")}}))
	if str(merged, "status") != "merged" || str(merged, "id") != str(cr, "id") {
		t.Fatalf("merge answer %v (create answered id %s)", merged, str(cr, "id"))
	}

	issue := g.post("/v1/capabilities/invoke", wf, map[string]any{"ref": refIssue, "input": map[string]any{"title": "Login page shows a stack trace", "body": "seen on staging"}})
	expect(t, issue, http.StatusOK)
	out, _ := issue.Body["output"].(map[string]any)
	if str(out, "status") != "open" || !strings.Contains(str(out, "url"), gt.URL) {
		t.Fatalf("issue: %s", issue.Raw)
	}

	// A credential Gitea rejects: CREDENTIAL_REJECTED, audited, and the secret nowhere.
	const badSecret = "0123456789abcdef0123456789abcdef0badf00d"
	bad := g.post("/v1/credentials", admin, map[string]any{"name": "revoked", "provider": "gitea", "secret": badSecret})
	expect(t, bad, http.StatusCreated)
	b2 := g.post("/v1/bindings", admin, map[string]any{"project": "p2", "refPattern": "connector:tracker.*", "provider": "gitea",
		"baseUrl": gt.URL, "credentialId": str(bad.Body, "id"), "config": map[string]any{"repository": "xema/app"}})
	expect(t, b2, http.StatusCreated)
	wf2 := g.token("--subject", "workflow:release", "--env", "project", "--org", "acme", "--project", "p2")
	rej := g.post("/v1/capabilities/invoke", wf2, map[string]any{"ref": refIssue, "input": map[string]any{"title": "t"}})
	if rej.Status != http.StatusBadGateway || str(rej.Body, "code") != "CREDENTIAL_REJECTED" {
		t.Fatalf("rejected credential: %d %s", rej.Status, rej.Raw)
	}
	rec := g.get("/v1/audit/"+str(rej.Body, "auditId"), admin)
	expect(t, rec, http.StatusOK)

	// The credential cannot be deleted while bound; the binding list shows no secret.
	del := g.do(mustReq(t, http.MethodDelete, g.URL+"/v1/credentials/"+credID, admin))
	if del.Status != http.StatusConflict {
		t.Fatalf("delete bound credential: %d %s", del.Status, del.Raw)
	}
	list := g.get("/v1/bindings", admin)
	expect(t, list, http.StatusOK)
	creds := g.get("/v1/credentials", admin)
	expect(t, creds, http.StatusOK)
	g.stop()
	assertNoSecret(t, g, []string{gt.Token, badSecret}, list.Raw, creds.Raw, rej.Raw, rec.Raw)
}

// approveRun invokes ref (held for approval), approves, and answers the outcome code the
// run ended with ("ok" or the typed error's code).
func approveRun(t *testing.T, g *gateway, admin, caller, ref string, input map[string]any) string {
	t.Helper()
	held := g.post("/v1/capabilities/invoke", caller, map[string]any{"ref": ref, "input": input})
	expect(t, held, http.StatusAccepted)
	id := str(held.Body, "approvalId")
	expect(t, g.post("/v1/approvals/"+id+"/approve", admin, map[string]any{}), http.StatusOK)
	inv := g.get("/v1/invocations/"+id, caller)
	expect(t, inv, http.StatusOK)
	return str(inv.Body, "outcome")
}

// waitMergeable polls Gitea's pull request until its background mergeability check has
// finished and found it mergeable (at most 60 s).
func waitMergeable(t *testing.T, gt *giteaServer, number string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var pull struct {
			Mergeable bool `json:"mergeable"`
		}
		giteaCall(t, gt.URL, gt.Token, http.MethodGet, "/api/v1/repos/xema/app/pulls/"+number, nil, http.StatusOK, &pull)
		if pull.Mergeable {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gitea pull %s still not mergeable after 60s", number)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func mustReq(t testing.TB, method, u, token string) *http.Request {
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

// assertNoSecret greps the gateway's logs, its database (the SQLite files, or on PostgreSQL
// every table of its database dumped row by row through database/sql) and the given answers
// for each secret, also hex-encoded (how PostgreSQL prints bytea).
func assertNoSecret(t *testing.T, g *gateway, secrets []string, bodies ...[]byte) {
	t.Helper()
	hay := [][]byte{g.logs.Bytes()}
	hay = append(hay, bodies...)
	if g.Store != "" {
		hay = append(hay, dumpPostgres(t, g))
	}
	_ = filepath.Walk(g.DataDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && strings.HasPrefix(fi.Name(), "xema.db") {
			b, _ := os.ReadFile(p)
			hay = append(hay, b)
		}
		return nil
	})
	for _, s := range secrets {
		for i, h := range hay {
			if bytes.Contains(h, []byte(s)) || bytes.Contains(h, []byte(hex.EncodeToString([]byte(s)))) {
				t.Fatalf("secret found in haystack %d (0 = logs, then answers, then the PostgreSQL dump if any, then database files)", i)
			}
		}
	}
}

// dumpPostgres is every row of every table in the gateway's PostgreSQL database, as text.
func dumpPostgres(t *testing.T, g *gateway) []byte {
	t.Helper()
	db := openStoreDB(t, g)
	rows, err := db.Query(`SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables
		WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if len(tables) == 0 {
		t.Fatal("the PostgreSQL database has no tables to search")
	}
	var dump bytes.Buffer
	for _, table := range tables {
		rs, err := db.Query(`SELECT r::text FROM ` + table + ` r`)
		if err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		for rs.Next() {
			var row string
			if err := rs.Scan(&row); err != nil {
				t.Fatal(err)
			}
			dump.WriteString(row)
			dump.WriteByte('\n')
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		rs.Close()
	}
	return dump.Bytes()
}

// TestConnectorTelegram sends through a conversation binding to the npm telegram-test-api
// server and reads the message back as the chat's client.
func TestConnectorTelegram(t *testing.T) {
	tg := startTelegram(t)
	g := startGateway(t, "")
	admin := g.token("--subject", "user:alice", "--org-role", "org_admin", "--env", "org", "--org", "acme")
	bot := g.token("--subject", "agent:support-bot", "--env", "project", "--org", "acme", "--project", "p1")
	const token = "123456:AAH-test-telegram-bot-secret"
	// The demo biome of the operator's store declares the send; acme installs it for itself.
	expect(t, g.post("/v1/grants", admin, map[string]any{"biomeId": "demo", "version": "1.0.0",
		"digestHash": g.digestOf(admin, "demo", "1.0.0")}), http.StatusCreated)
	connectorSetup(t, g, admin, map[string]any{"name": "support bot", "provider": "telegram", "secret": token},
		map[string]any{"refPattern": refSend, "conversation": "support-general", "provider": "telegram", "baseUrl": tg,
			"config": map[string]any{"chatId": "4242"}})

	r := g.post("/v1/capabilities/invoke", bot, map[string]any{"ref": refSend, "input": map[string]any{"conversation": "support-general", "text": "The welcome page is at kb/welcome."}})
	expect(t, r, http.StatusOK)
	out, _ := r.Body["output"].(map[string]any)
	if str(out, "conversation") != "support-general" || str(out, "messageId") == "" || str(out, "sentAt") == "" {
		t.Fatalf("send answer: %s", r.Raw)
	}
	raw, _ := json.Marshal(map[string]string{"token": token, "chatId": "4242"})
	resp, err := http.Post(tg+"/getUpdates", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(got), "The welcome page is at kb/welcome.") {
		t.Fatalf("telegram chat 4242 did not receive the message: %s", got)
	}

	unknown := g.post("/v1/capabilities/invoke", bot, map[string]any{"ref": refSend, "input": map[string]any{"conversation": "nowhere", "text": "hi"}})
	if unknown.Status != http.StatusNotFound || str(unknown.Body, "code") != "UNKNOWN_CONVERSATION" {
		t.Fatalf("unknown conversation: %d %s", unknown.Status, unknown.Raw)
	}
	g.stop()
	assertNoSecret(t, g, []string{token}, r.Raw, unknown.Raw)
}

// startTelegram runs telegram-test-api (at the version test/peers pins)
// on a loopback port and returns its URL.
func startTelegram(t *testing.T) string {
	t.Helper()
	mod := filepath.Join(npmPeers(t), "node_modules", "telegram-test-api")
	port := testnet.FreePort(t)
	script := fmt.Sprintf(`const S = require(%q); new S({port: %d, host: "127.0.0.1", storeTimeout: 60}).start();`, mod, port)
	cmd := exec.Command("node", "-e", script)
	logs := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("telegram-test-api did not listen: %s", logs.String())
	return ""
}

// TestBindingBadInput: typed 400s naming the field, nothing stored, admins only.
func TestBindingBadInput(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		admin := g.token("--subject", "user:alice", "--org-role", "org_admin", "--env", "org", "--org", "acme")
		member := g.token("--subject", "user:bob", "--org-role", "org_member", "--env", "org", "--org", "acme")
		const secret = "glpat-very-secret-token-value"
		c := g.post("/v1/credentials", admin, map[string]any{"name": "gl", "provider": "gitlab", "secret": secret})
		expect(t, c, http.StatusCreated)
		if strings.Contains(string(c.Raw), secret) || str(c.Body, "id") == "" {
			t.Fatalf("credential answer: %s", c.Raw)
		}
		credID := str(c.Body, "id")
		good := map[string]any{"refPattern": "connector:scm.*", "provider": "gitlab", "baseUrl": "https://gitlab.example.com",
			"credentialId": credID, "config": map[string]any{"repository": "acme/app"}}
		with := func(k string, v any) map[string]any {
			m := map[string]any{}
			for kk, vv := range good {
				m[kk] = vv
			}
			m[k] = v
			return m
		}
		for _, tc := range []struct {
			body  map[string]any
			field string
		}{
			{with("provider", "bitbucket"), "/provider"},
			{with("baseUrl", "not a url"), "/baseUrl"},
			{with("baseUrl", "https://user:pw@gitlab.example.com"), "/baseUrl"},
			{with("credentialId", "cred_unknown"), "/credentialId"},
			{with("refPattern", "connector:channel.*"), "/refPattern"},
			{with("config", map[string]any{"repository": "no-slash"}), "/config/repository"},
			{with("environment", "mars"), "/environment"},
			{with("conversation", "general"), "/conversation"},
		} {
			r := g.post("/v1/bindings", admin, tc.body)
			if r.Status != http.StatusBadRequest || str(r.Body, "code") != "INVALID_BINDING" || !strings.Contains(string(r.Raw), `"path":"`+tc.field+`"`) {
				t.Errorf("binding %v: %d %s; want 400 naming %s", tc.body, r.Status, r.Raw, tc.field)
			}
		}
		tg := g.post("/v1/credentials", admin, map[string]any{"provider": "telegram", "secret": "1:x"})
		expect(t, tg, http.StatusCreated)
		mismatch := with("credentialId", str(tg.Body, "id"))
		if r := g.post("/v1/bindings", admin, mismatch); r.Status != http.StatusBadRequest {
			t.Errorf("gitlab binding with a telegram credential: %d %s", r.Status, r.Raw)
		}
		if r := g.post("/v1/credentials", admin, map[string]any{"provider": "nope", "secret": secret}); r.Status != http.StatusBadRequest {
			t.Errorf("credential for an unknown provider: %d %s", r.Status, r.Raw)
		}
		expect(t, g.post("/v1/bindings", member, good), http.StatusForbidden)
		expect(t, g.get("/v1/credentials", member), http.StatusForbidden)

		list := g.get("/v1/bindings", admin)
		expect(t, list, http.StatusOK)
		if bs, _ := list.Body["bindings"].([]any); len(bs) != 0 {
			t.Fatalf("refused bindings were stored: %s", list.Raw)
		}
		ok := g.post("/v1/bindings", admin, good)
		expect(t, ok, http.StatusCreated)
		dup := g.post("/v1/bindings", admin, good)
		if dup.Status != http.StatusConflict || str(dup.Body, "code") != "BINDING_EXISTS" {
			t.Fatalf("duplicate binding: %d %s", dup.Status, dup.Raw)
		}
		del := g.do(mustReq(t, http.MethodDelete, g.URL+"/v1/bindings/"+str(ok.Body, "id"), admin))
		expect(t, del, http.StatusOK)
		expect(t, g.do(mustReq(t, http.MethodDelete, g.URL+"/v1/bindings/"+str(ok.Body, "id"), admin)), http.StatusNotFound)
		g.stop()
		assertNoSecret(t, g, []string{secret}, c.Raw, list.Raw)
	})
}
