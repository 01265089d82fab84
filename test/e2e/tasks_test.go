package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/testpg"
)

// tasksClient runs test/peers/tasks-client.mjs: the MCP Tasks extension's own client
// (@modelcontextprotocol/ext-tasks) over the @modelcontextprotocol/sdk transport, pinned by
// test/peers. Each operation is a fresh process, as a client resuming its persisted task ids.
type tasksClient struct {
	t      *testing.T
	script string
}

func newTasksClient(t *testing.T) *tasksClient {
	t.Helper()
	modules := filepath.Join(npmPeers(t), "node_modules")
	dir := t.TempDir() // ESM resolves packages from the script's directory: node_modules beside it
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "test", "peers", "tasks-client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "tasks-client.mjs")
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	return &tasksClient{t: t, script: script}
}

// do runs op against g's /mcp as token's holder and returns its JSON answer.
func (c *tasksClient) do(g *gateway, token, op string, args map[string]any) map[string]any {
	c.t.Helper()
	cmd := map[string]any{"url": g.URL + "/mcp", "token": token, "op": op}
	for k, v := range args {
		cmd[k] = v
	}
	raw, _ := json.Marshal(cmd)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	run := exec.CommandContext(ctx, "node", c.script, string(raw))
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		c.t.Fatalf("tasks client %s: %v\n%s", op, err, stderr.String())
	}
	var ans map[string]any
	if err := json.Unmarshal(out, &ans); err != nil {
		c.t.Fatalf("tasks client %s: %q: %v", op, out, err)
	}
	return ans
}

// call invokes the comment capability through the tasks client and returns its task id.
func (c *tasksClient) call(g *gateway, token string) string {
	c.t.Helper()
	ans := c.do(g, token, "call", map[string]any{"arguments": commentCall()})
	id, _ := ans["taskId"].(string)
	if ans["kind"] != "task" || !strings.HasPrefix(id, "apr_") {
		c.t.Fatalf("held call: %v; want a task", ans)
	}
	return id
}

func (c *tasksClient) task(g *gateway, token, id string) map[string]any {
	c.t.Helper()
	task, _ := c.do(g, token, "get", map[string]any{"taskId": id})["task"].(map[string]any)
	return task
}

// toolResult is the text and isError of a CallToolResult.
func toolResult(t *testing.T, res any) (string, bool) {
	t.Helper()
	m, _ := res.(map[string]any)
	content, _ := m["content"].([]any)
	if len(content) != 1 {
		t.Fatalf("tool result %v: want one content item", res)
	}
	text, _ := content[0].(map[string]any)["text"].(string)
	isErr, _ := m["isError"].(bool)
	return text, isErr
}

// installHeld installs ticketing with the comment capability requiring approval.
func installHeld(t *testing.T, g *gateway, prov *provider, admin string) {
	t.Helper()
	sub := g.install(admin, biomeDir(t, "ticketing", prov.URL))
	expect(t, g.grantCustomized(admin, sub, map[string]any{commentRef: map[string]any{"requiresApproval": true}}), http.StatusCreated)
}

// heldGateway is a gateway on dsn serving ticketing, its comment capability held for
// approval, with its provider and a tasks client.
func heldGateway(t *testing.T, dsn string) (*gateway, *provider, *tasksClient) {
	t.Helper()
	g, prov := startGateway(t, dsn), newProvider(t)
	installHeld(t, g, prov, g.adminToken())
	return g, prov, newTasksClient(t)
}

func TestMCPTasks(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g, prov, c := heldGateway(t, e.store(t))
		admin, bot := g.adminToken(), g.token("--subject", "agent:support-bot", "--env", "project")

		// Held -> working -> approved in the API -> completed with the output.
		id := c.call(g, bot)
		if task := c.task(g, bot, id); task["status"] != "working" || task["ttlMs"] == nil || prov.count() != 0 {
			t.Fatalf("tasks/get while pending: %v (provider calls %d); want working", task, prov.count())
		}
		unknown := c.do(g, bot, "get", map[string]any{"taskId": "apr_aaaaaaaaaaaaaaaa"})
		for name, token := range map[string]string{
			"another subject": g.token("--subject", "agent:other", "--env", "project"),
			"another org":     g.token("--subject", "agent:support-bot", "--env", "project", "--org", "other"),
		} {
			got := c.do(g, token, "get", map[string]any{"taskId": id})
			ge, _ := got["error"].(map[string]any)
			ue, _ := unknown["error"].(map[string]any)
			if ge == nil || ge["code"] != float64(-32602) || ue["code"] != ge["code"] ||
				strings.ReplaceAll(ge["message"].(string), id, "X") != strings.ReplaceAll(ue["message"].(string), "apr_aaaaaaaaaaaaaaaa", "X") {
				t.Fatalf("%s's tasks/get: %v; want -32602 exactly as an unknown id (%v)", name, got, unknown)
			}
		}
		expect(t, g.post("/v1/approvals/"+id+"/approve", admin, map[string]any{}), http.StatusOK)
		settled := c.do(g, bot, "settle", map[string]any{"taskId": id})
		text, isErr := toolResult(t, settled["result"])
		if settled["status"] != "completed" || isErr || !strings.Contains(text, `"output":{`) || !strings.Contains(text, `"auditId":"inv_`) || prov.count() != 1 {
			t.Fatalf("settled: %v (provider calls %d); want completed with the run's output, one run", settled, prov.count())
		}

		// Rejected -> completed, isError, with the approver's reason.
		rid := c.call(g, bot)
		expect(t, g.post("/v1/approvals/"+rid+"/reject", admin, map[string]any{"reason": "wrong ticket"}), http.StatusOK)
		task := c.task(g, bot, rid)
		text, isErr = toolResult(t, task["result"])
		if task["status"] != "completed" || !isErr || !strings.Contains(text, "APPROVAL_REJECTED") || !strings.Contains(text, "wrong ticket") {
			t.Fatalf("rejected: %v; want completed, isError, APPROVAL_REJECTED with the reason", task)
		}

		// Cancelled -> withdrawn: the approver sees it withdrawn, it never runs.
		cid := c.call(g, bot)
		if ans := c.do(g, bot, "cancel", map[string]any{"taskId": cid}); ans["cancelled"] != true {
			t.Fatalf("cancel: %v", ans)
		}
		if task := c.task(g, bot, cid); task["status"] != "cancelled" {
			t.Fatalf("after cancel: %v; want cancelled", task)
		}
		list := g.get("/v1/approvals?status=withdrawn", admin)
		expect(t, list, http.StatusOK)
		if !strings.Contains(string(list.Raw), cid) {
			t.Fatalf("the approver's withdrawn list lacks %s: %s", cid, list.Raw)
		}
		expect(t, g.post("/v1/approvals/"+cid+"/approve", admin, map[string]any{}), http.StatusConflict)
		heldAudit := str(g.get("/v1/invocations/"+cid, admin).Body, "auditId")
		audit := g.get("/v1/audit?decision=withdrawn&parent="+heldAudit, admin)
		if heldAudit == "" || !strings.Contains(string(audit.Raw), `"subject":{"kind":"agent","ref":"agent:support-bot"}`) {
			t.Fatalf("no withdrawn audit record by the requester linked to %s's call %s: %s", cid, heldAudit, audit.Raw)
		}

		// A provider failure once approved: completed with the tool error, as a synchronous call.
		prov.setMode("500")
		fid := c.call(g, bot)
		expect(t, g.post("/v1/approvals/"+fid+"/approve", admin, map[string]any{}), http.StatusOK)
		task = c.task(g, bot, fid)
		text, isErr = toolResult(t, task["result"])
		if task["status"] != "completed" || !isErr || !strings.Contains(text, `"providerStatus":500`) || prov.count() != 2 {
			t.Fatalf("provider failure: %v (provider calls %d); want completed, isError, the provider's status", task, prov.count())
		}
	})
}

// A task outlives the gateway process: held, gateway restarted, approved, completed.
func TestMCPTasksSurviveRestart(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g, prov, c := heldGateway(t, e.store(t))
		admin, bot := g.adminToken(), g.token("--subject", "agent:support-bot", "--env", "project")
		id := c.call(g, bot)
		g.stop()
		g.start()
		if task := c.task(g, bot, id); task["status"] != "working" {
			t.Fatalf("after restart: %v; want working", task)
		}
		expect(t, g.post("/v1/approvals/"+id+"/approve", admin, map[string]any{}), http.StatusOK)
		if task := c.task(g, bot, id); task["status"] != "completed" || prov.count() != 1 {
			t.Fatalf("approved after restart: %v (provider calls %d); want completed, one run", task, prov.count())
		}
	})
}

// Two replicas on one PostgreSQL: held on one, polled on the other.
func TestMCPTasksAcrossReplicas(t *testing.T) {
	gws := startReplicas(t, testpg.NewDatabase(t), 2)
	prov := newProvider(t)
	admin := gws[0].adminToken()
	bot := gws[0].token("--subject", "agent:support-bot", "--env", "project")
	installHeld(t, gws[0], prov, admin)
	c := newTasksClient(t)
	id := c.call(gws[0], bot)
	if task := c.task(gws[1], bot, id); task["status"] != "working" {
		t.Fatalf("polled on the other replica: %v; want working", task)
	}
	expect(t, gws[0].post("/v1/approvals/"+id+"/approve", admin, map[string]any{}), http.StatusOK)
	task := c.task(gws[1], bot, id)
	if text, isErr := toolResult(t, task["result"]); task["status"] != "completed" || isErr || !strings.Contains(text, `"output":{`) {
		t.Fatalf("completed on one replica, polled on the other: %v", task)
	}
}

// A client without the extension never gets a task: a retry under its idempotency key
// returns the hold while it waits, then the run's answer; the call runs once.
func TestMCPIdempotentRetryWithoutTasks(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g, prov, c := heldGateway(t, e.store(t))
		admin, bot := g.adminToken(), g.token("--subject", "agent:support-bot", "--env", "project")
		args := commentCall()
		args["idempotencyKey"] = "retry-1"
		first := c.do(g, bot, "legacy", map[string]any{"arguments": args})
		text, isErr := toolResult(t, first["result"])
		var held map[string]any
		_ = json.Unmarshal([]byte(text), &held)
		id, _ := held["approvalId"].(string)
		if !isErr || held["code"] != "PENDING_APPROVAL" || id == "" {
			t.Fatalf("held, without the extension: %v; want today's PENDING_APPROVAL answer", first)
		}
		if again, _ := toolResult(t, c.do(g, bot, "legacy", map[string]any{"arguments": args})["result"]); again != text {
			t.Fatalf("retry while pending: %s; want the hold %s", again, text)
		}
		expect(t, g.post("/v1/approvals/"+id+"/approve", admin, map[string]any{}), http.StatusOK)
		final, isErr := toolResult(t, c.do(g, bot, "legacy", map[string]any{"arguments": args})["result"])
		if isErr || !strings.Contains(final, `"output":{`) || prov.count() != 1 {
			t.Fatalf("retry once run: %s (provider calls %d); want the run's answer, one run", final, prov.count())
		}
		// HTTP: its own key, same story.
		req, _ := json.Marshal(commentCall())
		post := func() response {
			r, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/capabilities/invoke", bytes.NewReader(req))
			r.Header.Set("Authorization", "Bearer "+bot)
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Idempotency-Key", "http-1")
			return g.do(r)
		}
		h := post()
		expect(t, h, http.StatusAccepted)
		expect(t, g.post("/v1/approvals/"+str(h.Body, "approvalId")+"/approve", admin, map[string]any{}), http.StatusOK)
		again := post()
		expect(t, again, http.StatusOK)
		if again.Header.Get("Idempotent-Replayed") != "true" || prov.count() != 2 {
			t.Fatalf("HTTP retry once run: %s (provider calls %d); want the replayed 200, one run per key", again.Raw, prov.count())
		}
	})
}
