package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// grantCustomized re-approves the submitted biome's digest with a per-ref customization.
func (g *gateway) grantCustomized(admin string, sub response, customize map[string]any) response {
	g.t.Helper()
	return g.post("/v1/grants", admin, map[string]any{"biomeId": str(sub.Body, "biomeId"), "version": str(sub.Body, "version"),
		"digestHash": str(sub.Body, "digest.hash"), "customize": customize})
}

const commentRef = "ticket:comment.add@1"

// commentCalls numbers commentCall's calls.
var commentCalls atomic.Int64

// commentCall is a call of the comment capability, another one each time: an identical call
// made while one is held joins it (TestIdenticalHeldCallsJoin).
func commentCall() map[string]any {
	return map[string]any{"ref": commentRef, "input": map[string]any{"ticketId": "3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88",
		"text": fmt.Sprintf("hello %d", commentCalls.Add(1))}}
}

// heldCall installs ticketing with the comment capability requiring approval, makes one call
// as requester and returns the 202 answer.
func heldCall(t *testing.T, g *gateway, prov *provider, admin, requester string) response {
	t.Helper()
	sub := g.install(admin, biomeDir(t, "ticketing", prov.URL))
	expect(t, g.grantCustomized(admin, sub, map[string]any{commentRef: map[string]any{"requiresApproval": true}}), http.StatusCreated)
	r := g.post("/v1/capabilities/invoke", requester, commentCall())
	expect(t, r, http.StatusAccepted)
	return r
}

func TestApprovalFlow(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		prov := newProvider(t)
		admin := g.adminToken()
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		held := heldCall(t, g, prov, admin, bot)
		id, auditID := str(held.Body, "approvalId"), str(held.Body, "auditId")
		if str(held.Body, "status") != "pending-approval" || !strings.HasPrefix(id, "apr_") || auditID == "" {
			t.Fatalf("202 body %s: want status pending-approval, approvalId and auditId", held.Raw)
		}
		if prov.count() != 0 {
			t.Fatal("a held call reached the provider before approval")
		}
		rec := g.get("/v1/audit/"+auditID, admin)
		expect(t, rec, http.StatusOK)
		if str(rec.Body, "decision") != "pending-approval" {
			t.Fatalf("audit of the held call: %s", rec.Raw)
		}

		list := g.get("/v1/approvals?status=pending&ref="+commentRef+"&requester=agent:support-bot&biome=ticketing", admin)
		expect(t, list, http.StatusOK)
		if !strings.Contains(string(list.Raw), id) || !strings.Contains(string(list.Raw), `"text":"hello `) {
			t.Fatalf("pending list lacks %s with its input: %s", id, list.Raw)
		}
		expect(t, g.get("/v1/approvals", bot), http.StatusForbidden)
		expect(t, g.get("/v1/approvals?color=red", admin), http.StatusBadRequest)

		inv := g.get("/v1/invocations/"+id, bot)
		expect(t, inv, http.StatusOK)
		if str(inv.Body, "status") != "pending" {
			t.Fatalf("invocation before approval: %s", inv.Raw)
		}
		other := g.token("--subject", "agent:other", "--env", "project")
		expect(t, g.get("/v1/invocations/"+id, other), http.StatusNotFound)

		// An agent may not approve: approvals are decided by people.
		expect(t, g.post("/v1/approvals/"+id+"/approve", bot, map[string]any{}), http.StatusForbidden)

		ok := g.post("/v1/approvals/"+id+"/approve", admin, map[string]any{})
		expect(t, ok, http.StatusOK)
		if str(ok.Body, "status") != "done" || str(ok.Body, "decidedBy") != "user:alice" {
			t.Fatalf("approve answer: %s", ok.Raw)
		}
		if prov.count() != 1 || !strings.Contains(string(prov.last(t).Body), `"text":"hello `) {
			t.Fatalf("provider calls after approval: %d", prov.count())
		}
		if got := prov.last(t).Header.Get("X-Xema-Audit-Id"); got == "" || got == auditID {
			t.Fatalf("the run has audit id %q; want its own record, linked to %s", got, auditID)
		}
		run := g.get("/v1/audit/"+prov.last(t).Header.Get("X-Xema-Audit-Id"), admin)
		expect(t, run, http.StatusOK)
		if str(run.Body, "parentAuditId") != auditID {
			t.Fatalf("the run's audit record %s does not link to %s", run.Raw, auditID)
		}
		inv = g.get("/v1/invocations/"+id, bot)
		if str(inv.Body, "status") != "done" || !strings.Contains(string(inv.Raw), `"ticketId"`) {
			t.Fatalf("invocation after the run: %s", inv.Raw)
		}

		again := g.post("/v1/approvals/"+id+"/approve", admin, map[string]any{})
		expect(t, again, http.StatusConflict)
		if str(again.Body, "code") != "APPROVAL_ALREADY_DECIDED" || prov.count() != 1 {
			t.Fatalf("second approve: %s; provider calls %d", again.Raw, prov.count())
		}
	})
}

func TestApprovalBadInput(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		prov := newProvider(t)
		admin := g.adminToken()
		bob := g.token("--subject", "user:bob", "--org-role", "org_member", "--env", "project")
		held := heldCall(t, g, prov, admin, bob)
		id := str(held.Body, "approvalId")

		cases := []struct {
			name, path, token string
			body              any
			status            int
			code              string
		}{
			{"unknown", "/v1/approvals/apr_aaaaaaaaaaaaaaaa/approve", admin, map[string]any{}, http.StatusNotFound, "APPROVAL_NOT_FOUND"},
			{"malformed id", "/v1/approvals/nope/approve", admin, map[string]any{}, http.StatusBadRequest, "INVALID_INPUT"},
			{"own approval", "/v1/approvals/" + id + "/approve", bob, map[string]any{}, http.StatusForbidden, "OWN_APPROVAL"},
			{"reject without reason", "/v1/approvals/" + id + "/reject", admin, map[string]any{}, http.StatusBadRequest, "INVALID_INPUT"},
			{"reject with a blank reason", "/v1/approvals/" + id + "/reject", admin, map[string]any{"reason": "  "}, http.StatusBadRequest, "INVALID_INPUT"},
			{"unknown body field", "/v1/approvals/" + id + "/approve", admin, map[string]any{"force": true}, http.StatusBadRequest, "MALFORMED_JSON"},
		}
		for _, tc := range cases {
			r := g.post(tc.path, tc.token, tc.body)
			if r.Status != tc.status || str(r.Body, "code") != tc.code {
				t.Errorf("%s: %d %s, want %d %s", tc.name, r.Status, r.Raw, tc.status, tc.code)
			}
		}
		inv := g.get("/v1/invocations/"+id, admin)
		if str(inv.Body, "status") != "pending" || prov.count() != 0 {
			t.Fatalf("after refused decisions: %s, provider calls %d; want pending and none", inv.Raw, prov.count())
		}

		no := g.post("/v1/approvals/"+id+"/reject", admin, map[string]any{"reason": "not this ticket"})
		expect(t, no, http.StatusOK)
		if str(no.Body, "status") != "rejected" || str(no.Body, "reason") != "not this ticket" {
			t.Fatalf("reject answer: %s", no.Raw)
		}
		late := g.post("/v1/approvals/"+id+"/approve", admin, map[string]any{})
		if late.Status != http.StatusConflict || prov.count() != 0 {
			t.Fatalf("approve after reject: %s; provider calls %d", late.Raw, prov.count())
		}
	})
}

func TestApprovalExpires(t *testing.T) {
	g := startGateway(t, "", "--approval-ttl", "1s")
	prov := newProvider(t)
	admin := g.adminToken()
	bot := g.token("--subject", "agent:support-bot", "--env", "project")
	id := str(heldCall(t, g, prov, admin, bot).Body, "approvalId")
	time.Sleep(1200 * time.Millisecond)
	r := g.post("/v1/approvals/"+id+"/approve", admin, map[string]any{})
	if r.Status != http.StatusGone || str(r.Body, "code") != "APPROVAL_EXPIRED" {
		t.Fatalf("approve after expiry: %d %s, want 410 APPROVAL_EXPIRED", r.Status, r.Raw)
	}
	if inv := g.get("/v1/invocations/"+id, bot); str(inv.Body, "status") != "expired" || prov.count() != 0 {
		t.Fatalf("expired call: %s, provider calls %d", inv.Raw, prov.count())
	}
}

// approveConcurrently sends n approves of id spread over gateways and returns the statuses.
func approveConcurrently(t *testing.T, gws []*gateway, admin, id string, n int) map[int]int {
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := gws[i%len(gws)].post("/v1/approvals/"+id+"/approve", admin, map[string]any{})
			mu.Lock()
			statuses[r.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return statuses
}

func TestApprovalConcurrentApprovesRunOnce(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		prov := newProvider(t)
		admin := g.adminToken()
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		id := str(heldCall(t, g, prov, admin, bot).Body, "approvalId")
		statuses := approveConcurrently(t, []*gateway{g}, admin, id, 20)
		if statuses[http.StatusOK] != 1 || statuses[http.StatusConflict] != 19 || prov.count() != 1 {
			t.Fatalf("20 concurrent approves: statuses %v, provider calls %d; want one 200, 19 409 and one run", statuses, prov.count())
		}
	})
}

func TestRateLimitAndQuota(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		g := startGateway(t, e.store(t))
		prov := newProvider(t)
		admin := g.adminToken()
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		sub := g.install(admin, biomeDir(t, "ticketing", prov.URL))
		expect(t, g.grantCustomized(admin, sub, map[string]any{commentRef: map[string]any{
			"rateLimit": map[string]any{"requests": 2, "per": "1h"}}}), http.StatusCreated)
		for range 2 {
			expect(t, g.post("/v1/capabilities/invoke", bot, commentCall()), http.StatusOK)
		}
		r := g.post("/v1/capabilities/invoke", bot, commentCall())
		expect(t, r, http.StatusTooManyRequests)
		retry := r.Header.Get("Retry-After")
		if str(r.Body, "code") != "RATE_LIMITED" || retry == "" || fmt.Sprint(r.Body["retryAfter"]) != retry ||
			!strings.Contains(string(r.Raw), `"code":"RATE_LIMITED","detail"`) || !strings.HasPrefix(str(r.Body, "auditId"), "deny_") {
			t.Fatalf("over the rate limit: %s (Retry-After %q)", r.Raw, retry)
		}
		if prov.count() != 2 {
			t.Fatalf("provider calls %d, want 2", prov.count())
		}
		why := g.get("/v1/audit/"+str(r.Body, "auditId")+"/why-denied", bot)
		expect(t, why, http.StatusOK)
		// Another subject has its own counter.
		other := g.token("--subject", "agent:other", "--env", "project")
		expect(t, g.post("/v1/capabilities/invoke", other, commentCall()), http.StatusOK)

		expect(t, g.grantCustomized(admin, sub, map[string]any{commentRef: map[string]any{
			"quota": map[string]any{"requests": 1, "per": "24h"}}}), http.StatusCreated)
		third := g.token("--subject", "agent:third", "--env", "project")
		expect(t, g.post("/v1/capabilities/invoke", third, commentCall()), http.StatusOK)
		q := g.post("/v1/capabilities/invoke", third, commentCall())
		if q.Status != http.StatusTooManyRequests || str(q.Body, "code") != "QUOTA_EXCEEDED" || q.Header.Get("Retry-After") == "" {
			t.Fatalf("over the quota: %d %s", q.Status, q.Raw)
		}
	})
}

func TestGrantRefusesNonPositiveLimits(t *testing.T) {
	g := startGateway(t, "")
	prov := newProvider(t)
	admin := g.adminToken()
	sub := g.install(admin, biomeDir(t, "ticketing", prov.URL))
	for _, n := range []int{0, -5} {
		for _, kind := range []string{"rateLimit", "quota"} {
			r := g.grantCustomized(admin, sub, map[string]any{commentRef: map[string]any{kind: map[string]any{"requests": n, "per": "1m"}}})
			if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Raw), kind+"/requests") {
				t.Errorf("%s requests %d: %d %s; want 400 naming /%s/requests", kind, n, r.Status, r.Raw, kind)
			}
		}
	}
	// Nothing changed: the default grant still serves, without any limit hit.
	bot := g.token("--subject", "agent:support-bot", "--env", "project")
	expect(t, g.post("/v1/capabilities/invoke", bot, commentCall()), http.StatusOK)
}

func TestApprovalsShell(t *testing.T) {
	g := startGateway(t, "")
	prov := newProvider(t)
	admin := g.adminToken()
	bot := g.token("--subject", "agent:support-bot", "--env", "project")
	id := str(heldCall(t, g, prov, admin, bot).Body, "approvalId")
	id2 := str(g.post("/v1/capabilities/invoke", bot, commentCall()).Body, "approvalId")

	out, err := g.run("approvals", "list", "--server", g.URL, "--token", admin, "--status", "pending")
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, id2) {
		t.Fatalf("approvals list: %v\n%s", err, out)
	}
	if out, err := g.run("approvals", "reject", id2, "--server", g.URL, "--token", admin); err == nil {
		t.Fatalf("reject without --reason succeeded:\n%s", out)
	}
	out, err = g.run("approvals", "reject", id2, "--reason", "duplicate", "--server", g.URL, "--token", admin)
	if err != nil || !strings.Contains(out, "rejected") {
		t.Fatalf("approvals reject: %v\n%s", err, out)
	}
	out, err = g.run("approvals", "approve", id, "--server", g.URL, "--token", admin)
	if err != nil || !strings.Contains(out, "done") || prov.count() != 1 {
		t.Fatalf("approvals approve: %v\n%s (provider calls %d)", err, out, prov.count())
	}
	out, err = g.run("approvals", "approve", id, "--server", g.URL, "--token", admin)
	if err == nil || !strings.Contains(out, "APPROVAL_ALREADY_DECIDED") {
		t.Fatalf("approving twice: %v\n%s", err, out)
	}
}

// TestIdenticalHeldCallsJoin: a client without Tasks retrying a held call without a key, or
// firing it several times at once (through two replicas on PostgreSQL), gets one held call:
// every answer is 202 naming the same approval, with Location and Retry-After, one approval
// is pending, and approving it runs the call once.
func TestIdenticalHeldCallsJoin(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engineCase) {
		var gws []*gateway
		if dsn := e.store(t); dsn != "" {
			gws = startReplicas(t, dsn, 2) // two replicas on one database, sharing the development issuer
		} else {
			gws = []*gateway{startGateway(t, dsn)}
		}
		g := gws[0]
		prov := newProvider(t)
		admin := g.adminToken()
		bot := g.token("--subject", "agent:support-bot", "--env", "project")
		first := heldCall(t, g, prov, admin, bot)
		id := str(first.Body, "approvalId")
		call := map[string]any{"ref": commentRef, "input": map[string]any{"ticketId": "3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88", "text": "once"}}
		for _, r := range gws[1:] { // the other replica serves the grant once it learned of it
			waitFor(t, "the replica holds calls", http.StatusAccepted, func() response { return r.post("/v1/capabilities/invoke", bot, call) })
		}
		const calls = 8
		answers := make([]response, calls)
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() { answers[i] = gws[i%len(gws)].post("/v1/capabilities/invoke", bot, call) })
		}
		wg.Wait()
		joined := str(answers[0].Body, "approvalId")
		for i, r := range answers {
			if r.Status != http.StatusAccepted || str(r.Body, "approvalId") != joined || joined == id ||
				r.Header.Get("Location") != "/v1/invocations/"+joined || r.Header.Get("Retry-After") == "" {
				t.Fatalf("identical call %d: %d Location %q %s; want 202 naming approval %s like the others",
					i, r.Status, r.Header.Get("Location"), r.Raw, joined)
			}
		}
		list := g.get("/v1/approvals?status=pending&requester=agent:support-bot", admin)
		expect(t, list, http.StatusOK)
		if n := strings.Count(string(list.Raw), `"approvalId"`); n != 2 {
			t.Fatalf("pending approvals: %d in %s; want 2 (the first call and the identical ones)", n, list.Raw)
		}
		expect(t, g.post("/v1/approvals/"+joined+"/approve", admin, map[string]any{}), http.StatusOK)
		if prov.count() != 1 {
			t.Fatalf("the identical calls ran %d times; want once", prov.count())
		}
		if inv := g.get("/v1/invocations/"+joined, bot); str(inv.Body, "status") != "done" {
			t.Fatalf("GET /v1/invocations/%s: %s; want done", joined, inv.Raw)
		}
	})
}

// TestApprovalWalkthrough runs docs/approvals.md's walkthroughs as written, over HTTP and
// MCP, against a gateway started as `make run` starts it: the agent's call is held (202 with
// Location), the approver approves it, and the agent learns the outcome and reads the page.
func TestApprovalWalkthrough(t *testing.T) {
	g := startGateway(t, "")
	env := []string{"XEMA=" + g.bin, "SERVER=" + g.URL, "DATA=" + g.DataDir}
	out := docShell(t, t.TempDir(), docBlock(t, "approvals.md", "walkthrough:http"), env...)
	for _, want := range []string{"HTTP/1.1 202 Accepted", "Location: /v1/invocations/apr_", "Retry-After: 5",
		`"status":"pending"`, "kb:page.publish@1: done (outcome ok)", `"status":"done"`, `"published":true`,
		"escalate after 10 minutes"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the HTTP walkthrough lacks %q:\n%s", want, out)
		}
	}
	out = docShell(t, t.TempDir(), docBlock(t, "approvals.md", "walkthrough:mcp"), env...)
	for _, want := range []string{`"resultType":"task"`, "kb:page.publish@1: done (outcome ok)", `"status":"completed"`,
		`\"published\":true`} {
		if !strings.Contains(out, want) {
			t.Fatalf("the MCP walkthrough lacks %q:\n%s", want, out)
		}
	}
}
