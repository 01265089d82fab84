package e2e

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/connection/connectiontest"
	"github.com/xemahq/xema/internal/identity/hydratest"
)

// connectionsBlock returns the block of docs/federation.md marked <!-- connections:NAME -->.
func connectionsBlock(t *testing.T, name string) string {
	t.Helper()
	return docBlock(t, "federation.md", "connections:"+name)
}

// hydraEnvNames are the variables hydratest configures hydra with (Start, StartWithLogin,
// DynamicRegistration): the doc's hydra block must set each of them.
var hydraEnvNames = []string{"DSN", "SECRETS_SYSTEM", "STRATEGIES_ACCESS_TOKEN", "SERVE_PUBLIC_HOST", "SERVE_PUBLIC_PORT",
	"SERVE_ADMIN_HOST", "SERVE_ADMIN_PORT", "URLS_SELF_ISSUER", "URLS_LOGIN", "URLS_CONSENT"}

// TestConnectionsDoc runs docs/federation.md's connections walkthrough as written, in bash,
// against the binary (SQLite), a real hydra with dynamic client registration and the
// go-sdk's protected MCP server, substituting only the paths and addresses the inputs block
// names: the admin registers and connects, the first connection lists the tools, the admin grants them;
// an agent acting for Bob is told to connect, Bob connects, the same call runs with his
// token; Bob disconnects and the agent is told to connect again. The browser steps are hydra's
// login and consent, then a GET of the callback as the browser would.
func TestConnectionsDoc(t *testing.T) {
	hydra := hydratest.StartWithLogin(t, map[string]hydratest.Person{
		"alice": {Subject: "alice@tools"}, "bob": {Subject: "bob@tools"},
	}, hydratest.DynamicRegistration()...)
	srv := connectiontest.Start(t, hydra)
	g := startGateway(t, "")

	// The hydra block sets what the tests set, dynamic registration included.
	hydraBlock := connectionsBlock(t, "hydra")
	names := append([]string(nil), hydraEnvNames...)
	for _, e := range hydratest.DynamicRegistration() {
		names = append(names, strings.SplitN(e, "=", 2)[0])
	}
	if !strings.Contains(hydraBlock, `"$HYDRA" serve all --dev --sqa-opt-out`) {
		t.Errorf("the doc's hydra block does not run hydra as the tests do: %s", hydraBlock)
	}
	for _, n := range names {
		if !regexp.MustCompile(`(?m)(?:^|\s)` + n + `=`).MatchString(hydraBlock) {
			t.Errorf("the doc's hydra block does not set %s, which the tests' hydra is started with", n)
		}
	}

	// The inputs block, its addresses replaced by this test's: every later block runs after it,
	// as in the reader's shell.
	inputs := connectionsBlock(t, "inputs")
	subst := map[string]string{"XEMA": g.bin, "XEMA_SERVER": g.URL, "DATA": g.DataDir, "MCP_URL": srv.URL}
	for name, value := range subst {
		re := regexp.MustCompile(`(?m)^((?:export )?` + name + `=).*$`)
		if !re.MatchString(inputs) {
			t.Fatalf("the inputs block does not set %s", name)
		}
		inputs = re.ReplaceAllString(inputs, "${1}"+strings.ReplaceAll(shellQuote(value), "$", "$$"))
	}
	run := func(name string) string {
		t.Helper()
		out := docShell(t, t.TempDir(), inputs+"\n"+connectionsBlock(t, name))
		t.Logf("connections:%s printed:\n%s", name, out)
		return out
	}
	// browse follows the page the CLI printed as the person would: in the console, signed in
	// as them, Connect (POST /v1/connections, the cookie kept, as the console does), then
	// hydra's login and consent as who, then the gateway's callback in the same browser.
	consolePage := "Open " + g.URL + "/console/connections and press Connect on tools"
	browse := func(out, subject, role, env, who string) string {
		t.Helper()
		if !strings.Contains(out, consolePage) {
			t.Fatalf("the CLI did not name the console page to connect at:\n%s", out)
		}
		start := g.post("/v1/connections", g.token("--subject", subject, "--org-role", role, "--env", env), map[string]any{"providerId": "tools"})
		expect(t, start, http.StatusOK)
		u := str(start.Body, "url")
		if !strings.HasPrefix(u, hydra.PublicURL+"/oauth2/auth?") || !strings.Contains(u, "&code_challenge_method=S256&") {
			t.Fatalf("the authorization request: %s", u)
		}
		status, page := callback(t, hydra.Authorize(t, u, who).String(), start.Header)
		if status != http.StatusOK || !strings.Contains(page, "Connected your account to tools.") {
			t.Fatalf("the callback for %s: %d %s", who, status, page)
		}
		return page
	}
	has := func(block, out string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Fatalf("connections:%s printed no %q:\n%s", block, w, out)
			}
		}
	}

	out := run("register")
	has("register", out, `"auth": "oauth"`, `"version": "1.0.1"`, `"tools": []`)
	if page := browse(out, "user:alice", "org_admin", "org", "alice"); !strings.Contains(page, "Its tools were listed") || !strings.Contains(page, "tools 1.0.2") {
		t.Fatalf("the first connection's page does not say the tools were listed for 1.0.2: %s", page)
	}

	out = run("approve")
	has("approve", out, `"ref": "tools:whoami@1"`, `"ref": "tools:echo@1"`, "grant ", "tools@1.0.2")

	out = run("agent")
	has("agent", out, `"code":"CONNECTION_REQUIRED"`, `"kind":"connect"`, `"url":"`+g.URL+`/console/connections"`)
	if n := len(srv.Calls()); n != 0 {
		t.Fatalf("the denied call reached the server (%d calls)", n)
	}
	browse(out, "user:bob", "org_member", "project", "bob")

	out = run("retry")
	has("retry", out, `"subject":"bob@tools"`, `"status": "connected"`)
	if subs := srv.Subjects(); len(subs) != 1 || subs[0] != "bob@tools" {
		t.Fatalf("the server saw %v; want Bob's token once", subs)
	}
	// The audit record names the connection the call used, as the doc says.
	id := regexp.MustCompile(`"auditId":"(inv_[a-z0-9]+)"`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("no auditId in %s", out)
	}
	rec := g.get("/v1/audit/"+id[1], g.adminToken())
	for _, w := range []string{`"connection":{"id":"conn_`, `"provider":"tools"`, `"owner":"user"`, `"person":"user:bob"`, `"status":"connected"`} {
		if !strings.Contains(string(rec.Raw), w) {
			t.Fatalf("the audit record lacks %s: %s", w, rec.Raw)
		}
	}

	out = run("disconnect")
	has("disconnect", out, `"revoked": true`, `"code":"CONNECTION_REQUIRED"`)
	if strings.Contains(g.logs.String(), "eyJhbGci") {
		t.Fatal("the gateway logged a token")
	}
}

// shellQuote quotes s for bash.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
