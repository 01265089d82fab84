package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const webhookSecret = "e2e-approval-webhook-secret-0123456789"

// webhookReceiver is an approvers' webhook as a receiver writes one: it checks every
// request's X-Xema-Signature (Stripe's scheme: HMAC-SHA256 of "<t>.<body>", hex, within 5
// minutes) and refuses a bad one with 401; it answers the statuses of fail in turn, then 200
// (or 503 while down).
type webhookReceiver struct {
	URL string

	mu       sync.Mutex
	fail     []int
	down     bool
	attempts int
	bad      int
	events   []map[string]any
}

func newWebhookReceiver(t *testing.T, fail ...int) *webhookReceiver {
	w := &webhookReceiver{fail: fail}
	w.URL = newServer(t, w)
	return w
}

func verifySignature(header string, body []byte) bool {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(t, 0)).Abs() > 5*time.Minute {
		return false
	}
	m := hmac.New(sha256.New, []byte(webhookSecret))
	m.Write([]byte(ts + "." + string(body)))
	return hmac.Equal([]byte(sig), []byte(hex.EncodeToString(m.Sum(nil))))
}

func (w *webhookReceiver) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.attempts++
	if !verifySignature(r.Header.Get("X-Xema-Signature"), body) {
		w.bad++
		rw.WriteHeader(http.StatusUnauthorized)
		return
	}
	switch {
	case w.down:
		rw.WriteHeader(http.StatusServiceUnavailable)
		return
	case len(w.fail) > 0:
		status := w.fail[0]
		w.fail = w.fail[1:]
		rw.WriteHeader(status)
		return
	}
	var ev map[string]any
	if err := json.Unmarshal(body, &ev); err == nil {
		w.events = append(w.events, ev)
	}
	rw.WriteHeader(http.StatusOK)
}

func (w *webhookReceiver) setDown(down bool) {
	w.mu.Lock()
	w.down = down
	w.mu.Unlock()
}

// got returns the delivered events of approval id as "event:status", and the attempts and
// badly signed requests so far.
func (w *webhookReceiver) got(id string) (events []string, attempts, bad int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range w.events {
		if ev["approvalId"] == id {
			events = append(events, fmt.Sprint(ev["event"], ":", ev["status"]))
		}
	}
	return events, w.attempts, w.bad
}

func (w *webhookReceiver) event(id, kind string) map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range w.events {
		if ev["approvalId"] == id && ev["event"] == kind {
			return ev
		}
	}
	return nil
}

func webhookFlags(t *testing.T, url string) []string {
	file := filepath.Join(t.TempDir(), "webhook.secret")
	if err := os.WriteFile(file, []byte(webhookSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--approval-webhook", url + "/hooks/xema", "--approval-webhook-secret-file", file}
}

// TestApprovalWebhook: approvers' webhook answers 500 twice, then 200: the held event
// arrives once it does, signed, with what an approver needs and without the input; the
// decision follows. The call itself never waited for the webhook.
func TestApprovalWebhook(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		hook := newWebhookReceiver(t, 500, 500)
		g := startGateway(t, e.store(t), append(webhookFlags(t, hook.URL), "--metrics-reader", "user:alice")...)
		prov := newProvider(t)
		admin := g.adminToken()
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		id := str(heldCall(t, g, prov, admin, bot).Body, "approvalId")

		waitUntil(t, 30*time.Second, "the held event after two 500s", func() bool {
			evs, _, _ := hook.got(id)
			return len(evs) == 1
		})
		evs, attempts, bad := hook.got(id)
		if evs[0] != "held:pending" || attempts != 3 || bad != 0 {
			t.Fatalf("events %v after %d attempts (%d badly signed); want held after 3, all signed", evs, attempts, bad)
		}
		ev := hook.event(id, "held")
		for _, k := range []string{"org", "ref", "requester", "environment", "riskTier", "expiresAt", "consoleUrl", "biomeVersion", "policyRevision"} {
			if s, _ := ev[k].(string); s == "" {
				t.Errorf("held event lacks %s: %v", k, ev)
			}
		}
		if _, ok := ev["input"]; ok || !strings.HasSuffix(str(ev, "consoleUrl"), "/console/approvals/"+id) ||
			str(ev, "requester") != "agent:support-bot" || str(ev, "ref") != commentRef {
			t.Errorf("held event %v: want no input, the deep link, requester and ref", ev)
		}

		expect(t, g.post("/v1/approvals/"+id+"/approve", admin, map[string]any{}), http.StatusOK)
		waitUntil(t, 30*time.Second, "the decided event", func() bool {
			evs, _, _ := hook.got(id)
			return len(evs) == 2
		})
		if ev := hook.event(id, "decided"); str(ev, "status") != "approved" || str(ev, "decidedBy") != "user:alice" {
			t.Errorf("decided event %v", ev)
		}
		m := g.get("/metrics", admin)
		for _, want := range []string{`xema_approval_notifications_total{channel="webhook",result="retried"} 2`,
			`xema_approval_notifications_total{channel="webhook",result="delivered"} 2`} {
			if !strings.Contains(string(m.Raw), want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		g.stop()
		if strings.Contains(g.logs.String(), webhookSecret) {
			t.Error("the gateway's log holds the webhook secret")
		}
	})
}

// TestApprovalWebhookKill9: the gateway is killed (SIGKILL) after holding a call and before
// its event was delivered; started again, it delivers it.
func TestApprovalWebhookKill9(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		hook := newWebhookReceiver(t)
		hook.setDown(true)
		flags := webhookFlags(t, hook.URL)
		g := startGateway(t, e.store(t), flags...)
		prov := newProvider(t)
		admin := g.adminToken()
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		id := str(heldCall(t, g, prov, admin, bot).Body, "approvalId")
		g.kill()
		if evs, _, _ := hook.got(id); len(evs) != 0 {
			t.Fatalf("delivered before the kill: %v", evs)
		}
		hook.setDown(false)
		g.restart(flags...)
		waitUntil(t, 60*time.Second, "the held event after the restart", func() bool {
			evs, _, _ := hook.got(id)
			return len(evs) >= 1
		})
		if evs, _, bad := hook.got(id); evs[0] != "held:pending" || bad != 0 {
			t.Fatalf("after the restart: %v (%d badly signed); want the held event", evs, bad)
		}
	})
}

// TestApprovalNotAnApprover: an admin of the org whose environment the held capability is
// not granted in sees why they may not decide it, and deciding anyway is a 403 naming
// what is missing; another org's admin gets the unknown id's 404.
func TestApprovalNotAnApprover(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		prov := newProvider(t)
		admin := g.adminToken()
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		sub := g.install(admin, biomeDir(t, "ticketing", prov.URL))
		expect(t, g.grantCustomized(admin, sub, map[string]any{commentRef: map[string]any{"requiresApproval": true,
			"environments": []string{"project"}}}), http.StatusCreated)
		r := g.post("/v1/capabilities/invoke", bot, commentCall())
		expect(t, r, http.StatusAccepted)
		id := str(r.Body, "approvalId")

		one := g.get("/v1/approvals/"+id, admin)
		expect(t, one, http.StatusOK)
		if one.Body["canDecide"] != false || str(one.Body, "whyNot.code") != "NOT_AN_APPROVER" ||
			!strings.Contains(str(one.Body, "whyNot.message"), "not granted in org") {
			t.Fatalf("the org admin in environment org sees %s; want canDecide false naming environment org", one.Raw)
		}
		for verb, body := range map[string]map[string]any{"approve": {}, "reject": {"reason": "no"}} {
			d := g.post("/v1/approvals/"+id+"/"+verb, admin, body)
			if d.Status != http.StatusForbidden || str(d.Body, "code") != "NOT_AN_APPROVER" || !strings.Contains(str(d.Body, "message"), "not granted in org") {
				t.Fatalf("%s as the org-environment admin: %d %s; want 403 NOT_AN_APPROVER naming environment org", verb, d.Status, d.Raw)
			}
		}
		out, err := g.run("approvals", "list", "--server", g.URL, "--token", admin)
		if err != nil || !strings.Contains(out, "NOT_AN_APPROVER") {
			t.Fatalf("approvals list: %v\n%s", err, out)
		}
		stranger := g.token("--subject", "user:alice", "--org-role", "org_admin", "--env", "project", "--org", "acme")
		expect(t, g.get("/v1/approvals/"+id, stranger), http.StatusNotFound)
		if d := g.post("/v1/approvals/"+id+"/approve", stranger, map[string]any{}); d.Status != http.StatusNotFound || str(d.Body, "code") != "APPROVAL_NOT_FOUND" {
			t.Fatalf("another org's admin: %d %s; want 404 APPROVAL_NOT_FOUND", d.Status, d.Raw)
		}
		inProject := g.token("--subject", "user:alice", "--org-role", "org_admin", "--env", "project")
		if one := g.get("/v1/approvals/"+id, inProject); one.Body["canDecide"] != true {
			t.Fatalf("the admin in environment project: %s; want canDecide", one.Raw)
		}
		expect(t, g.post("/v1/approvals/"+id+"/approve", inProject, map[string]any{}), http.StatusOK)
		if prov.count() != 1 {
			t.Fatalf("provider calls %d, want 1", prov.count())
		}
	})
}

// TestApprovalRedecidedOnApprove: the grant changed after the call was held; approving
// re-decides, answers the new denial and the call never runs.
func TestApprovalRedecidedOnApprove(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		prov := newProvider(t)
		admin := g.adminToken()
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		sub := g.install(admin, biomeDir(t, "ticketing", prov.URL))
		expect(t, g.grantCustomized(admin, sub, map[string]any{commentRef: map[string]any{"requiresApproval": true}}), http.StatusCreated)
		r := g.post("/v1/capabilities/invoke", bot, commentCall())
		expect(t, r, http.StatusAccepted)
		id := str(r.Body, "approvalId")
		held := g.get("/v1/approvals/"+id, admin)
		if str(held.Body, "policyRevision") == "" || str(held.Body, "biomeVersion") != "1.0.0" || str(held.Body, "riskTier") == "" {
			t.Fatalf("held call %s: want its policy revision, biome version and risk tier", held.Raw)
		}
		expect(t, g.grantCustomized(admin, sub, map[string]any{commentRef: map[string]any{"requiresApproval": true,
			"environments": []string{"org"}}}), http.StatusCreated)
		d := g.post("/v1/approvals/"+id+"/approve", admin, map[string]any{})
		if d.Status != http.StatusForbidden || str(d.Body, "code") != "DENIED" || !strings.Contains(str(d.Body, "message"), "ENVIRONMENT_NOT_ALLOWED") ||
			!strings.Contains(str(d.Body, "message"), "did not run") || prov.count() != 0 {
			t.Fatalf("approve under the changed grant: %d %s, provider calls %d; want 403 naming the new denial, no run", d.Status, d.Raw, prov.count())
		}
		if inv := g.get("/v1/invocations/"+id, bot); str(inv.Body, "status") != "failed" {
			t.Fatalf("the call after: %s; want failed", inv.Raw)
		}
	})
}

// TestApprovalPages250: 250 held calls are each found once, a page at a time, through the
// API and the CLI's --all (one subject holds them all: the per-subject bound is raised).
func TestApprovalPages250(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t), "--max-pending-approvals", "300")
		prov := newProvider(t)
		admin := g.adminToken()
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		held := map[string]bool{str(heldCall(t, g, prov, admin, bot).Body, "approvalId"): true}
		for len(held) < 250 {
			r := g.post("/v1/capabilities/invoke", bot, commentCall())
			expect(t, r, http.StatusAccepted)
			held[str(r.Body, "approvalId")] = true
		}
		seen, cursor, pages := map[string]bool{}, "", 0
		for {
			path := "/v1/approvals?status=pending&requester=agent:support-bot&ref=" + commentRef + "&limit=100"
			if cursor != "" {
				path += "&cursor=" + cursor
			}
			p := g.get(path, admin)
			expect(t, p, http.StatusOK)
			pages++
			list, _ := p.Body["approvals"].([]any)
			for _, v := range list {
				id := str(v.(map[string]any), "approvalId")
				if seen[id] || !held[id] {
					t.Fatalf("page %d: %s listed twice or never held", pages, id)
				}
				seen[id] = true
			}
			if cursor = str(p.Body, "nextCursor"); cursor == "" {
				break
			}
		}
		if len(seen) != 250 || pages != 3 {
			t.Fatalf("%d calls in %d pages; want 250 in 3", len(seen), pages)
		}
		out, err := g.run("approvals", "list", "--all", "--format", "json", "--server", g.URL, "--token", admin)
		if err != nil {
			t.Fatalf("approvals list --all: %v\n%s", err, out)
		}
		var all struct {
			Approvals []map[string]any `json:"approvals"`
		}
		if err := json.Unmarshal([]byte(out), &all); err != nil || len(all.Approvals) != 250 {
			t.Fatalf("approvals list --all: %d calls (%v); want 250", len(all.Approvals), err)
		}
		for _, bad := range []string{"limit=0", "limit=101", "limit=ten", "cursor=bm90LWEtY3Vyc29y", "status=lost"} {
			if r := g.get("/v1/approvals?"+bad, admin); r.Status != http.StatusBadRequest {
				t.Errorf("%s: %d %s; want 400", bad, r.Status, r.Raw)
			}
		}
		if prov.count() != 0 {
			t.Fatalf("provider calls %d; want none", prov.count())
		}
	})
}

// TestApprovalChat: the operator names acme's conversation for approval notices; a held call
// of acme reaches the real Telegram test server through acme's channel.send-message binding,
// with the deep link.
func TestApprovalChat(t *testing.T) {
	tg := startTelegram(t)
	g := startGateway(t, "", "--approval-chat", "acme=approvers", "--public-url", "https://xema.example")
	prov := newProvider(t)
	admin := g.token("--subject", "user:alice", "--org-role", "org_admin", "--env", "org", "--org", "acme")
	bot := g.token("--subject", "agent:support-bot", "--env", "project", "--org", "acme")
	const token = "123456:AAH-approvals-telegram-bot-secret"
	expect(t, g.post("/v1/grants", admin, map[string]any{"biomeId": "demo", "version": "1.0.0",
		"digestHash": g.digestOf(admin, "demo", "1.0.0")}), http.StatusCreated)
	connectorSetup(t, g, admin, map[string]any{"name": "approvals bot", "provider": "telegram", "secret": token},
		map[string]any{"refPattern": refSend, "conversation": "approvers", "provider": "telegram", "baseUrl": tg,
			"config": map[string]any{"chatId": "7777"}})
	id := str(heldCall(t, g, prov, admin, bot).Body, "approvalId")

	var got string
	waitUntil(t, 30*time.Second, "the approval notice in telegram chat 7777", func() bool {
		raw, _ := json.Marshal(map[string]string{"token": token, "chatId": "7777"})
		resp, err := http.Post(tg+"/getUpdates", "application/json", strings.NewReader(string(raw)))
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got = string(body)
		return strings.Contains(got, id)
	})
	for _, want := range []string{"agent:support-bot", commentRef, "https://xema.example/console/approvals/" + id} {
		if !strings.Contains(got, want) {
			t.Errorf("the notice %s lacks %q", got, want)
		}
	}
	g.stop()
	if strings.Contains(g.logs.String(), token) {
		t.Error("the gateway's log holds the telegram token")
	}
}

// TestConsoleHintApprovesDemo: the token the console's sign-in hint tells a person to mint
// can approve the demo's held calls (the support bot's, in environment project, as README's
// walkthrough makes them), even when the demo's grant admits them only there.
func TestConsoleHintApprovesDemo(t *testing.T) {
	js, err := os.ReadFile(filepath.Join(repoRoot(t), "internal", "console", "static", "assets", "console.js"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`"xema dev token --data-dir DIR ([^"]+)"`).FindSubmatch(js)
	if m == nil {
		t.Fatal("console.js has no sign-in hint with a xema dev token command")
	}
	hint := strings.Fields(strings.ReplaceAll(string(m[1]), "user:you", "user:dana"))
	g := startGateway(t, "")
	admin := g.adminToken()
	expect(t, g.post("/v1/grants", admin, map[string]any{"biomeId": "demo", "version": "1.0.0",
		"digestHash": g.digestOf(admin, "demo", "1.0.0"), "customize": map[string]any{
			"workflow:run.start@1": map[string]any{"requiresApproval": true, "environments": []string{"project"}}}}), http.StatusCreated)
	bot := g.token("--subject", "agent:support-bot", "--env", "project")
	r := g.post("/v1/capabilities/invoke", bot, map[string]any{"ref": "workflow:run.start@1", "input": map[string]any{"workflowId": "onboarding"}})
	expect(t, r, http.StatusAccepted)
	person := g.token(hint...)
	ok := g.post("/v1/approvals/"+str(r.Body, "approvalId")+"/approve", person, map[string]any{})
	if ok.Status != http.StatusOK || str(ok.Body, "status") != "done" {
		t.Fatalf("approve with the hint's token (%v): %d %s", hint, ok.Status, ok.Raw)
	}
}
