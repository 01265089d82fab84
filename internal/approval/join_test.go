package approval_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/xemahq/xema/internal/approval"
	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/store"
)

// TestIdenticalCallsJoinThePendingOne: identical calls of one requester made at once, or
// while one waits, are one held call: one approval, one decision, one run. Each call is
// audited, linked to the held call's record; a call that differs in input or context, or one
// made once the first was decided, is held on its own.
func TestIdenticalCallsJoinThePendingOne(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, map[string]any{"requiresApproval": true})
	input := json.RawMessage(`{"ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88","text":"hi"}`)
	call := func(ec identity.ExecContext, in json.RawMessage) *gateway.Held {
		res, err := f.app.Gateway.Invoke(ctx, ec, gateway.Request{Ref: ref, Input: in})
		if err != nil || res.Held == nil {
			t.Errorf("call: %+v %v, want held", res, err)
			return &gateway.Held{}
		}
		return res.Held
	}
	const calls = 12
	held := make([]*gateway.Held, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The same input with its keys in another order and other spacing: the same call.
			in := input
			if i%2 == 1 {
				in = json.RawMessage(`{ "text": "hi", "ticketId": "3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88" }`)
			}
			held[i] = call(bot, in)
		}()
	}
	wg.Wait()
	id, joined := held[0].ApprovalID, 0
	for _, h := range held {
		if h.ApprovalID != id {
			t.Fatalf("identical calls answered approvals %s and %s; want one", id, h.ApprovalID)
		}
		if h.Joined {
			joined++
		}
	}
	if joined != calls-1 {
		t.Fatalf("%d of %d identical calls joined; want all but the first", joined, calls)
	}
	pending, err := f.app.Store.ListApprovals(ctx, store.ApprovalFilter{Org: bot.Org, Status: store.ApprovalPending})
	if err != nil || len(pending) != 1 {
		t.Fatalf("pending approvals: %d %v; want 1", len(pending), err)
	}
	linked, err := f.app.Store.ListAudit(ctx, store.AuditQuery{Org: bot.Org, ParentID: pending[0].AuditID,
		Decision: audit.DecisionPendingApproval})
	if err != nil || len(linked) != calls-1 {
		t.Fatalf("audit records of the joined calls linked to the held one: %d %v; want %d", len(linked), err, calls-1)
	}

	other := call(bot, json.RawMessage(`{"ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88","text":"hello"}`))
	project := bot
	project.Project = "billing"
	inProject := call(project, input)
	another := call(exec("agent:other-bot", "project", ""), input)
	for name, h := range map[string]*gateway.Held{"other input": other, "other project": inProject, "other subject": another} {
		if h.ApprovalID == id || h.Joined {
			t.Errorf("call with %s: approval %s joined=%v; want its own", name, h.ApprovalID, h.Joined)
		}
	}

	if _, ferr := f.decide(approval.RefApprove, alice, map[string]any{"approvalId": id}); ferr != nil {
		t.Fatal(ferr)
	}
	if f.runs.Load() != 1 {
		t.Fatalf("the joined calls ran %d times; want once", f.runs.Load())
	}
	if again := call(bot, input); again.ApprovalID == id || again.Joined {
		t.Fatalf("the call once the first was decided: approval %s joined=%v; want a new one", again.ApprovalID, again.Joined)
	}
}

// TestHoldJoinsAcrossReplicas: two replicas (two queues, each with its own per-requester
// turn) holding the identical call at once store one approval; the other answers it joined.
func TestHoldJoinsAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, map[string]any{"requiresApproval": true})
	const replicas = 6
	joined := make([]*gateway.Joined, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := &approval.Queue{Store: f.app.Store}
			joined[i], errs[i] = q.Hold(ctx, gateway.Pending{ID: fmt.Sprintf("apr_replica%d", i), AuditID: fmt.Sprintf("inv_replica%d", i),
				Ref: ref, Biome: "ticketing", Exec: bot, Input: json.RawMessage(`{"text":"hi"}`)})
		}()
	}
	wg.Wait()
	held := ""
	for i := range replicas {
		switch {
		case errs[i] != nil:
			t.Fatalf("replica %d: %v", i, errs[i])
		case joined[i] == nil && held != "":
			t.Fatalf("replicas %s and apr_replica%d both held the call", held, i)
		case joined[i] == nil:
			held = fmt.Sprintf("apr_replica%d", i)
		}
	}
	for i, j := range joined {
		if j != nil && (j.ApprovalID != held || j.AuditID != "inv_"+held[len("apr_"):]) {
			t.Fatalf("replica %d joined %+v; want %s", i, *j, held)
		}
	}
}
