package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/approval"
	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/server"
)

// mcpModern speaks the 2026-07-28 protocol to /mcp by hand (the go-sdk client has no Tasks):
// one JSON-RPC request per POST, with the per-request _meta and headers it requires.
type mcpModern struct {
	t   *testing.T
	url string
}

type rpcAnswer struct {
	Result map[string]any `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (m mcpModern) call(token, method string, params map[string]any, tasks bool) rpcAnswer {
	m.t.Helper()
	caps := map[string]any{}
	if tasks {
		caps["extensions"] = map[string]any{server.TasksExtension: map[string]any{}}
	}
	if params == nil {
		params = map[string]any{}
	}
	params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientInfo": map[string]any{"name": "test", "version": "1"}, "io.modelcontextprotocol/clientCapabilities": caps}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, m.url+"/mcp", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name, ok := params["name"].(string); ok {
		req.Header.Set("Mcp-Name", name)
	} else if id, ok := params["taskId"].(string); ok {
		req.Header.Set("Mcp-Name", id)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		m.t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans rpcAnswer
	raw := []byte{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			raw = append([]byte{}, d...)
		} else if len(raw) == 0 && bytes.HasPrefix(bytes.TrimSpace(line), []byte("{")) {
			raw = append([]byte{}, line...)
		}
	}
	if testing.Verbose() {
		m.t.Logf("%s -> %d %s", method, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		m.t.Fatalf("%s: status %d, answer %q: %v", method, resp.StatusCode, raw, err)
	}
	return ans
}

// mcpServer serves f's gateway with its MCP endpoint, callers named by tokens.
func mcpServer(f *apptest.Fixture, auth tokens) *httptest.Server {
	s := &server.Server{Gateway: f.App.Gateway, Tools: f.App.Tools, Idempotency: f.App.Idempotency, Audit: f.App.Store, Approvals: f.App.Approvals, OperatorOrg: identity.DefaultOrg,
		Ready: f.App.Ready, Mounts: map[string]http.Handler{}, Auth: auth}
	s.Mounts["/mcp"] = s.MCPHandler()
	return httptest.NewServer(s.Handler())
}

func (m mcpModern) invoke(token string, tasks bool, key string) rpcAnswer {
	args := map[string]any{"ref": "ticket:comment.add@1", "input": map[string]any{"ticketId": "3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88", "text": "hi"}}
	if key != "" {
		args["idempotencyKey"] = key
	}
	return m.call(token, "tools/call", map[string]any{"name": "xema_capabilities_invoke", "arguments": args}, tasks)
}

func toolText(t *testing.T, res map[string]any) (string, bool) {
	t.Helper()
	content, _ := res["content"].([]any)
	if len(content) != 1 {
		t.Fatalf("tool result %v: want one content item", res)
	}
	text, _ := content[0].(map[string]any)["text"].(string)
	isErr, _ := res["isError"].(bool)
	return text, isErr
}

// TestMCPTasks: a held invoke is a task for a client that declared the extension, and only
// for it; tasks/get follows it to the run's answer; only its requester knows it.
func TestMCPTasks(t *testing.T) {
	f := apptest.New(t, apptest.Options{Customize: map[string]any{"ticket:comment.add@1": map[string]any{"requiresApproval": true}}})
	bot, alice := apptest.Exec("agent:support-bot", "project", ""), apptest.Exec("user:alice", "org", "org_admin")
	otherOrg := bot
	otherOrg.Org = "other"
	public := bot // the requester with a token of another environment
	public.Environment = "public-session"
	srv := mcpServer(f, tokens{"bot": bot, "alice": alice, "other": otherOrg, "peer": apptest.Exec("agent:peer", "project", ""), "public": public})
	defer srv.Close()
	m := mcpModern{t, srv.URL}

	d := m.call("bot", "server/discover", nil, false)
	caps, _ := d.Result["capabilities"].(map[string]any)
	if exts, _ := caps["extensions"].(map[string]any); exts[server.TasksExtension] == nil {
		t.Fatalf("server/discover: %v; want the tasks extension advertised", d)
	}
	plain := m.invoke("bot", false, "")
	if text, isErr := toolText(t, plain.Result); !isErr || !strings.Contains(text, gateway.CodePendingApproval) || plain.Result["resultType"] == "task" {
		t.Fatalf("held, without the extension: %v; want today's isError %s", plain, gateway.CodePendingApproval)
	}
	created := m.invoke("bot", true, "")
	id, _ := created.Result["taskId"].(string)
	ttl, _ := created.Result["ttlMs"].(float64)
	if created.Result["resultType"] != "task" || created.Result["status"] != "working" || !strings.HasPrefix(id, "apr_") ||
		ttl <= 0 || created.Result["pollIntervalMs"] != float64(server.TaskPollInterval.Milliseconds()) || created.Result["createdAt"] == nil {
		t.Fatalf("held, with the extension: %v; want a CreateTaskResult", created)
	}
	if got := m.call("bot", "tasks/get", map[string]any{"taskId": id}, true); got.Result["status"] != "working" || got.Result["resultType"] != "complete" {
		t.Fatalf("tasks/get while pending: %v", got)
	}
	for _, who := range []string{"peer", "other", "alice", "public"} {
		got := m.call(who, "tasks/get", map[string]any{"taskId": id}, true)
		unknown := m.call(who, "tasks/get", map[string]any{"taskId": "apr_aaaaaaaaaaaaaaaa"}, true)
		if got.Error == nil || got.Error.Code != -32602 || unknown.Error == nil || got.Error.Code != unknown.Error.Code ||
			strings.ReplaceAll(got.Error.Message, id, "X") != strings.ReplaceAll(unknown.Error.Message, "apr_aaaaaaaaaaaaaaaa", "X") {
			t.Fatalf("%s's tasks/get: %+v; want -32602 exactly as for an unknown id (%+v)", who, got.Error, unknown.Error)
		}
		for _, method := range []string{"tasks/cancel", "tasks/update"} {
			if c := m.call(who, method, map[string]any{"taskId": id, "inputResponses": map[string]any{}}, true); c.Error == nil || c.Error.Code != -32602 {
				t.Fatalf("%s's %s: %+v; want -32602", who, method, c)
			}
		}
	}
	got, _, _ := callJSON(t, http.MethodGet, srv.URL+"/v1/invocations/"+id, "public")
	unknown, _, _ := callJSON(t, http.MethodGet, srv.URL+"/v1/invocations/apr_aaaaaaaaaaaaaaaa", "public")
	if got != http.StatusNotFound || unknown != got {
		t.Fatalf("GET /v1/invocations/{id} with the requester's public token: %d; want %d, as for an unknown id", got, unknown)
	}
	if u := m.call("bot", "tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{"x": map[string]any{"action": "accept"}}}, true); u.Error != nil || u.Result["resultType"] != "complete" {
		t.Fatalf("tasks/update by the requester: %+v; want the acknowledgement", u)
	}
	for name, params := range map[string]map[string]any{"without taskId": {}, "a number as taskId": {"taskId": 7},
		"an id of another kind": {"taskId": "inv_" + id}, "a huge id": {"taskId": "apr_" + strings.Repeat("a", 10000)}} {
		if got := m.call("bot", "tasks/get", params, true); got.Error == nil || got.Error.Code != -32602 {
			t.Fatalf("tasks/get %s: %+v; want -32602", name, got)
		}
	}
	raw, _ := json.Marshal(map[string]string{"approvalId": id})
	if res, err := f.App.Gateway.Invoke(context.Background(), alice, gateway.Request{Ref: approval.RefApprove, Input: raw}); err != nil || res.Denial != nil {
		t.Fatalf("approve: %+v %v", res, err)
	}
	done := m.call("bot", "tasks/get", map[string]any{"taskId": id}, true)
	result, _ := done.Result["result"].(map[string]any)
	text, isErr := toolText(t, result)
	if done.Result["status"] != "completed" || isErr || !strings.Contains(text, `"output":{"commentId":"c1"}`) || result["resultType"] != "complete" ||
		result["structuredContent"].(map[string]any)["auditId"] == nil || done.Result["ttlMs"] != nil {
		t.Fatalf("tasks/get once run: %v; want completed with the run's CallToolResult", done)
	}

	// Cancelled: withdrawn, and a cancel of an ended task is acknowledged as well.
	other := m.invoke("bot", true, "")
	oid, _ := other.Result["taskId"].(string)
	if c := m.call("bot", "tasks/cancel", map[string]any{"taskId": oid}, true); c.Error != nil || c.Result["resultType"] != "complete" {
		t.Fatalf("tasks/cancel: %+v", c)
	}
	if got := m.call("bot", "tasks/get", map[string]any{"taskId": oid}, true); got.Result["status"] != "cancelled" {
		t.Fatalf("tasks/get after cancel: %v; want cancelled", got)
	}
	if c := m.call("bot", "tasks/cancel", map[string]any{"taskId": id}, true); c.Error != nil {
		t.Fatalf("tasks/cancel of a completed task: %+v; want the acknowledgement", c)
	}
	if got := m.call("bot", "tasks/get", map[string]any{"taskId": id}, true); got.Result["status"] != "completed" {
		t.Fatalf("a completed task after cancel: %v; want still completed", got)
	}
}

// TestIdempotentRetryFollowsHeldCall: a client without the extension retries with its
// idempotency key and gets the hold while the call waits, then the run's answer, and the
// call runs once (over MCP and HTTP alike).
func TestIdempotentRetryFollowsHeldCall(t *testing.T) {
	runs := 0
	f := apptest.New(t, apptest.Options{Customize: map[string]any{"ticket:comment.add@1": map[string]any{"requiresApproval": true}},
		Provider: func(w http.ResponseWriter, _ *http.Request) {
			runs++
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"commentId":"c1"}`))
		}})
	bot, alice := apptest.Exec("agent:support-bot", "project", ""), apptest.Exec("user:alice", "org", "org_admin")
	srv := mcpServer(f, tokens{"bot": bot})
	defer srv.Close()
	m := mcpModern{t, srv.URL}
	first := m.invoke("bot", false, "k-1")
	text, isErr := toolText(t, first.Result)
	var held gateway.Held
	if err := json.Unmarshal([]byte(text), &held); err != nil || !isErr || held.ApprovalID == "" {
		t.Fatalf("held: %v", first)
	}
	again := m.invoke("bot", false, "k-1")
	if text2, _ := toolText(t, again.Result); text2 != text {
		t.Fatalf("retry while pending: %s; want the hold %s", text2, text)
	}
	raw, _ := json.Marshal(map[string]string{"approvalId": held.ApprovalID})
	if res, err := f.App.Gateway.Invoke(context.Background(), alice, gateway.Request{Ref: approval.RefApprove, Input: raw}); err != nil || res.Denial != nil {
		t.Fatalf("approve: %+v %v", res, err)
	}
	final := m.invoke("bot", false, "k-1")
	ftext, fErr := toolText(t, final.Result)
	if fErr || !strings.Contains(ftext, `"output":{"commentId":"c1"}`) || runs != 1 {
		t.Fatalf("retry once run: %v, runs %d; want the run's answer, one run", final, runs)
	}
	// The same key over HTTP is the same caller's key: the final answer, replayed.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/capabilities/invoke", strings.NewReader(
		`{"ref":"ticket:comment.add@1","input":{"text":"hi","ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88"}}`))
	req.Header.Set("Authorization", "Bearer bot")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(server.IdempotencyHeader, "k-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(body.String()) != ftext || resp.Header.Get(server.ReplayedHeader) != "true" || runs != 1 {
		t.Fatalf("HTTP retry: %d %s, runs %d; want 200 with the run's answer, replayed, one run", resp.StatusCode, body.String(), runs)
	}
}

// TestHeldAnswerSaysWhereToFollow: a held call over HTTP is 202 with Location (the
// requester's GET /v1/invocations/{id}) and Retry-After; the identical call again joins it
// (same approval, joined) instead of waiting for a second approval, and over MCP without the
// extension the held result names the approval and how to follow it.
func TestHeldAnswerSaysWhereToFollow(t *testing.T) {
	f := apptest.New(t, apptest.Options{Customize: map[string]any{"ticket:comment.add@1": map[string]any{"requiresApproval": true}}})
	srv := mcpServer(f, tokens{"bot": apptest.Exec("agent:support-bot", "project", "")})
	defer srv.Close()
	body := `{"ref":"ticket:comment.add@1","input":{"ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88","text":"hi"}}`
	invoke := func() (*http.Response, gateway.Held) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/capabilities/invoke", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer bot")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h gateway.Held
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
			t.Fatal(err)
		}
		return resp, h
	}
	resp, first := invoke()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusAccepted || first.ApprovalID == "" || first.Joined ||
		loc != "/v1/invocations/"+first.ApprovalID || resp.Header.Get("Retry-After") != "5" ||
		!strings.Contains(first.Message, "GET /v1/invocations/"+first.ApprovalID) {
		t.Fatalf("held call: %d Location %q Retry-After %q %+v; want 202 naming where to follow it",
			resp.StatusCode, loc, resp.Header.Get("Retry-After"), first)
	}
	resp, again := invoke()
	if resp.StatusCode != http.StatusAccepted || again.ApprovalID != first.ApprovalID || !again.Joined ||
		resp.Header.Get("Location") != loc || again.AuditID == first.AuditID {
		t.Fatalf("the identical call again: %d %+v; want 202 joined to %s, audited as its own call", resp.StatusCode, again, first.ApprovalID)
	}
	if st, v, raw := callJSON(t, http.MethodGet, srv.URL+loc, "bot"); st != http.StatusOK || v["status"] != "pending" {
		t.Fatalf("GET %s: %d %s; want the pending call", loc, st, raw)
	}
	text, isErr := toolText(t, mcpModern{t, srv.URL}.invoke("bot", false, "").Result)
	if !isErr || !strings.Contains(text, `"joined":true`) || !strings.Contains(text, first.ApprovalID) || !strings.Contains(text, "idempotencyKey") {
		t.Fatalf("the identical call over MCP without Tasks: %s; want it joined, naming the approval and how to follow it", text)
	}
}
