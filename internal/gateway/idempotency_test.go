package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/store"
)

// encodeForTest renders a result as its status and auditId, the way the edge would.
func encodeForTest(res *gateway.Result, err error) (gateway.Answer, string) {
	var ge *fault.Error
	switch {
	case errors.As(err, &ge):
		body, _ := json.Marshal(map[string]string{"code": ge.Code, "auditId": ge.AuditID})
		return gateway.Answer{Status: http.StatusBadGateway, Body: body}, ge.Code
	case res.Denial != nil:
		body, _ := json.Marshal(map[string]string{"code": res.Denial.Code, "auditId": res.AuditID})
		return gateway.Answer{Status: http.StatusForbidden, Body: body}, res.Denial.Code
	}
	body, _ := json.Marshal(map[string]string{"auditId": res.AuditID})
	return gateway.Answer{Status: http.StatusOK, Body: body}, ""
}

// TestIdempotencyScope: a key replays only for the caller that made the first call in the
// same decision context (environment, armed set, project, session, groups, roles, org role);
// any other context under the key is IDEMPOTENCY_KEY_REUSED and runs nothing. Sets compare
// as sets, the input whitespace aside. Every replay is its own audit record, linked to the
// first call's.
func TestIdempotencyScope(t *testing.T) {
	runs := 0
	f := apptest.New(t, apptest.Options{Provider: func(w http.ResponseWriter, _ *http.Request) {
		runs++
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"commentId":"c1"}`))
	}})
	gw, ctx := f.App.Gateway, context.Background()
	first := apptest.Exec("agent:support-bot", "project", "")
	first.Project, first.Session = "p1", "s1"
	first.Groups, first.Roles, first.Armed = []string{"a", "b"}, []string{"r1", "r2"}, []string{"ticket:*", "kb:*"}
	req := gateway.Request{Ref: commentRef, Input: comment}
	const key = "scope-key-1"

	ans, err := gw.InvokeIdempotent(ctx, first, req, key, encodeForTest)
	if err != nil || ans.Status != http.StatusOK || ans.Replayed || runs != 1 {
		t.Fatalf("first call: %+v %v (runs %d)", ans, err, runs)
	}
	var firstBody struct{ AuditID string }
	_ = json.Unmarshal(ans.Body, &firstBody)

	same := first
	same.Groups, same.Roles, same.Armed = []string{"b", "a"}, []string{"r2", "r1"}, []string{"kb:*", "ticket:*"}
	spaced := gateway.Request{Ref: commentRef, Input: json.RawMessage(" " + string(comment) + "\n")}
	for name, ec := range map[string]identity.ExecContext{"the same context": first, "sets reordered": same} {
		ans, err := gw.InvokeIdempotent(ctx, ec, spaced, key, encodeForTest)
		if err != nil || !ans.Replayed || string(ans.Body) != string(mustBody(t, firstBody.AuditID)) || runs != 1 {
			t.Fatalf("%s: %+v %v (runs %d): want the first answer replayed", name, ans, err, runs)
		}
	}

	other := func(change func(*identity.ExecContext)) identity.ExecContext {
		ec := first
		ec.Groups, ec.Roles, ec.Armed = append([]string(nil), first.Groups...), append([]string(nil), first.Roles...), append([]string(nil), first.Armed...)
		change(&ec)
		return ec
	}
	for name, ec := range map[string]identity.ExecContext{
		"environment": other(func(ec *identity.ExecContext) { ec.Environment = "public-session" }),
		"armed":       other(func(ec *identity.ExecContext) { ec.Armed = []string{"kb:*"} }),
		"project":     other(func(ec *identity.ExecContext) { ec.Project = "p2" }),
		"no project":  other(func(ec *identity.ExecContext) { ec.Project = "" }),
		"session":     other(func(ec *identity.ExecContext) { ec.Session = "s2" }),
		"groups":      other(func(ec *identity.ExecContext) { ec.Groups = []string{"a"} }),
		"roles":       other(func(ec *identity.ExecContext) { ec.Roles = []string{"r1", "r2", "admin"} }),
		"org role":    other(func(ec *identity.ExecContext) { ec.OrgRole = "org_admin" }),
	} {
		_, err := gw.InvokeIdempotent(ctx, ec, req, key, encodeForTest)
		var ge *fault.Error
		if !errors.As(err, &ge) || ge.Code != gateway.CodeIdempotencyKeyReused || ge.Kind != fault.Unprocessable {
			t.Errorf("another %s under the key: %v, want %s", name, err, gateway.CodeIdempotencyKeyReused)
		}
	}
	if runs != 1 {
		t.Fatalf("the provider ran %d times", runs)
	}

	linked, err := f.App.Store.ListAudit(ctx, store.AuditQuery{Org: first.Org, ParentID: firstBody.AuditID})
	if err != nil {
		t.Fatal(err)
	}
	replays := 0
	for _, rec := range linked {
		if rec.Outcome == gateway.OutcomeReplayed {
			replays++
			if rec.Decision != "allowed" || rec.SubjectRef != first.Subject.Ref || rec.ID == firstBody.AuditID {
				t.Errorf("replay record %+v", rec)
			}
		}
	}
	if replays != 2 {
		t.Fatalf("%d replay records linked to %s, want 2: %+v", replays, firstBody.AuditID, linked)
	}
}

func mustBody(t *testing.T, auditID string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]string{"auditId": auditID})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
