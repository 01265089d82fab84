package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/capacity"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/idempotency"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/runner"
	"github.com/xemahq/xema/internal/store"
)

const commentRef = "ticket:comment.add@1"

var comment = json.RawMessage(`{"ticketId":"3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88","text":"hi"}`)

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
	keys, ctx := f.App.Idempotency, context.Background()
	first := apptest.Exec("agent:support-bot", "project", "")
	first.Project, first.Session = "p1", "s1"
	first.Groups, first.Roles, first.Armed = []string{"a", "b"}, []string{"r1", "r2"}, []string{"ticket:*", "kb:*"}
	req := gateway.Request{Ref: commentRef, Input: comment}
	const key = "scope-key-1"

	ans, err := keys.Invoke(ctx, first, req, key)
	if err != nil || ans.Status != http.StatusOK || ans.Replayed || runs != 1 {
		t.Fatalf("first call: %+v %v (runs %d)", ans, err, runs)
	}
	firstAns := ans
	var firstBody struct{ AuditID string }
	_ = json.Unmarshal(ans.Body, &firstBody)

	same := first
	same.Groups, same.Roles, same.Armed = []string{"b", "a"}, []string{"r2", "r1"}, []string{"kb:*", "ticket:*"}
	spaced := gateway.Request{Ref: commentRef, Input: json.RawMessage(" " + string(comment) + "\n")}
	for name, ec := range map[string]identity.ExecContext{"the same context": first, "sets reordered": same} {
		ans, err := keys.Invoke(ctx, ec, spaced, key)
		if err != nil || !ans.Replayed || !bytes.Equal(ans.Body, firstAns.Body) || ans.Status != firstAns.Status || runs != 1 {
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
		_, err := keys.Invoke(ctx, ec, req, key)
		var ge *fault.Error
		if !errors.As(err, &ge) || ge.Code != idempotency.CodeKeyReused || ge.Kind != fault.Unprocessable {
			t.Errorf("another %s under the key: %v, want %s", name, err, idempotency.CodeKeyReused)
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

// TestBusyProviderReleasesTheKey: a call refused PROVIDER_BUSY never ran, so its key is
// released and a retry under it runs, rather than replaying the 503 for a day.
func TestBusyProviderReleasesTheKey(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	f := apptest.New(t, apptest.Options{Provider: func(w http.ResponseWriter, _ *http.Request) {
		if runs.Add(1) == 1 {
			close(entered)
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"commentId":"c1"}`))
	}})
	keys := keysOver(t, f, func(d *gateway.Deps) { d.PerProvider = capacity.NewProviderSlots(1) })
	ctx, bot := context.Background(), apptest.Exec("agent:support-bot", "project", "")
	req := gateway.Request{Ref: commentRef, Input: comment}
	done := make(chan error, 1)
	go func() {
		_, err := keys.Invoke(ctx, bot, req, "holds-the-slot")
		done <- err
	}()
	<-entered
	busy, err := keys.Invoke(ctx, bot, req, "busy-key")
	var body struct{ Code string }
	_ = json.Unmarshal(busy.Body, &body)
	if err != nil || busy.Status != http.StatusServiceUnavailable || body.Code != capacity.CodeProviderBusy {
		t.Fatalf("second call while the provider is busy: %+v %v; want 503 %s", busy, err, capacity.CodeProviderBusy)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	retry, err := keys.Invoke(ctx, bot, req, "busy-key")
	if err != nil || !retry.Ran() || retry.Replayed || runs.Load() != 2 {
		t.Fatalf("retry under the key: %+v %v (runs %d); want it run", retry, err, runs.Load())
	}
}

// tokenOutage is the identity provider's token endpoint during an outage, then back: the
// first Token fails (a fault injected into the real funnel), the rest answer.
type tokenOutage struct{ calls atomic.Int32 }

func (o *tokenOutage) Token(context.Context, string) (string, error) {
	if o.calls.Add(1) == 1 {
		return "", errors.New("token endpoint unreachable")
	}
	return "test-service-token", nil
}

// TestNoServiceTokenReleasesTheKey: a call refused NO_SERVICE_TOKEN never reached its
// provider, so its key is released and a retry under it, once tokens are minted again, runs
// rather than replaying the 503 for a day.
func TestNoServiceTokenReleasesTheKey(t *testing.T) {
	var runs atomic.Int32
	f := apptest.New(t, apptest.Options{Provider: func(w http.ResponseWriter, _ *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"commentId":"c1"}`))
	}})
	keys := keysOver(t, f, func(d *gateway.Deps) { d.Tokens = &tokenOutage{} })
	ctx, bot := context.Background(), apptest.Exec("agent:support-bot", "project", "")
	req := gateway.Request{Ref: commentRef, Input: comment}
	refused, err := keys.Invoke(ctx, bot, req, "token-key")
	var body struct{ Code string }
	_ = json.Unmarshal(refused.Body, &body)
	if err != nil || refused.Status != http.StatusServiceUnavailable || body.Code != runner.CodeNoToken || runs.Load() != 0 {
		t.Fatalf("a call without a service token: %+v %v (runs %d); want 503 %s, no run", refused, err, runs.Load(), runner.CodeNoToken)
	}
	retry, err := keys.Invoke(ctx, bot, req, "token-key")
	if err != nil || !retry.Ran() || retry.Replayed || runs.Load() != 1 {
		t.Fatalf("retry under the key: %d %s replayed=%v %v (runs %d); want it run", retry.Status, retry.Body, retry.Replayed, err, runs.Load())
	}
}

// keysOver is the layer over a funnel of f's parts with change made to them.
func keysOver(t *testing.T, f *apptest.Fixture, change func(*gateway.Deps)) *idempotency.Keys {
	t.Helper()
	d := f.App.Gateway.Deps()
	change(&d)
	gw, err := gateway.New(d)
	if err != nil {
		t.Fatal(err)
	}
	return &idempotency.Keys{Funnel: gw, Store: f.App.Store, Spool: f.App.Spool}
}
