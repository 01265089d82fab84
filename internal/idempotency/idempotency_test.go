package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/admin"
	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/capacity"
	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/idempotency"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/kernel"
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

// keeping is the key store with each completion's result replaced by result: nil is the
// store as a previous-release replica writes it during a rolling upgrade (that release
// knows no result), anything else a damaged row.
type keeping struct {
	store.IdempotencyStore
	result json.RawMessage
}

func (k keeping) CompleteIdempotency(ctx context.Context, c store.IdempotencyCompletion) error {
	c.Result = k.result
	return k.IdempotencyStore.CompleteIdempotency(ctx, c)
}

// commenting is a fixture whose ticket provider answers every comment, and how many times
// it ran.
func commenting(t *testing.T) (*apptest.Fixture, *int) {
	runs := new(int)
	f := apptest.New(t, apptest.Options{Provider: func(w http.ResponseWriter, _ *http.Request) {
		*runs++
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"commentId":"c1"}`))
	}})
	return f, runs
}

// storedRow is the row of key as the store holds it (a claim of a live key reads it back).
func storedRow(t *testing.T, s store.IdempotencyStore, ec identity.ExecContext, key string) store.IdempotencyRecord {
	t.Helper()
	now := time.Now()
	row, claimed, err := s.ClaimIdempotency(context.Background(), store.IdempotencyRecord{Org: ec.Org, Subject: ec.Subject.Ref,
		Key: key, InputHash: "any", CreatedAt: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil || claimed {
		t.Fatalf("read back %s: claimed %v, %v", key, claimed, err)
	}
	return row
}

// TestKeysAcrossReleases: replicas of two releases share the keys during a rolling upgrade.
// A key a previous-release replica completed (no result) replays its answer as sent on this
// one; a key this one completed keeps, beside its result, the answer as sent that a
// previous-release replica replays, byte for byte the first answer, with its audit id.
func TestKeysAcrossReleases(t *testing.T) {
	f, runs := commenting(t)
	ctx, bot := context.Background(), apptest.Exec("agent:support-bot", "project", "")
	req := gateway.Request{Ref: commentRef, Input: comment}
	old := &idempotency.Keys{Funnel: f.App.Gateway, Store: keeping{f.App.Store, nil}, Spool: f.App.Spool}

	first, err := old.Invoke(ctx, bot, req, "from-the-previous-release")
	if err != nil || !first.Ran() || *runs != 1 {
		t.Fatalf("first call: %+v %v (runs %d)", first, err, *runs)
	}
	if row := storedRow(t, f.App.Store, bot, "from-the-previous-release"); row.State != store.IdempotencyDone || row.Result != nil {
		t.Fatalf("the previous release's row = %+v; want done without a result", row)
	}
	replay, err := f.App.Idempotency.Invoke(ctx, bot, req, "from-the-previous-release")
	if err != nil || !replay.Replayed || replay.Status != first.Status || !bytes.Equal(replay.Body, first.Body) || *runs != 1 {
		t.Fatalf("replay of the previous release's key: %d %s %v (runs %d); want %d %s replayed", replay.Status, replay.Body, err,
			*runs, first.Status, first.Body)
	}

	first, err = f.App.Idempotency.Invoke(ctx, bot, req, "from-this-release")
	if err != nil || !first.Ran() || *runs != 2 {
		t.Fatalf("first call: %+v %v (runs %d)", first, err, *runs)
	}
	var sent struct{ AuditID string }
	_ = json.Unmarshal(first.Body, &sent)
	row := storedRow(t, f.App.Store, bot, "from-this-release")
	if row.Result == nil || row.Status != first.Status || !bytes.Equal(row.Body, first.Body) || sent.AuditID == "" || row.AuditID != sent.AuditID {
		t.Fatalf("this release's row = %d %s %s audit %q; want a result and the first answer %d %s, audit %q", row.Status,
			row.Body, row.Result, row.AuditID, first.Status, first.Body, sent.AuditID)
	}
	var kept map[string]json.RawMessage
	if json.Unmarshal(row.Result, &kept) != nil || string(kept["kind"]) != `"ran"` || bytes.Contains(row.Result, []byte(`"status"`)) {
		t.Fatalf("the kept result %s is not a ran result naming no HTTP status", row.Result)
	}
}

// TestUnreadableResultIsNotRunAgain: a key whose stored result is damaged or of a kind this
// release does not know answers IDEMPOTENCY_RESULT_UNREADABLE (500) naming the first call's
// audit record: not a 200, not a second run, and no replay recorded as answered.
func TestUnreadableResultIsNotRunAgain(t *testing.T) {
	f, runs := commenting(t)
	ctx, bot := context.Background(), apptest.Exec("agent:support-bot", "project", "")
	req := gateway.Request{Ref: commentRef, Input: comment}
	for i, bad := range []string{`{"kind":"ran","ran":{"output":{"commentId":"c1"},"au`, `{"kind":"undone","ran":{"output":1,"auditId":"inv_1"}}`,
		`{"kind":"error","error":{"code":"X","message":"m"},"fault":"catastrophic"}`, `"ran"`} {
		key := fmt.Sprintf("damaged-%d", i)
		keys := &idempotency.Keys{Funnel: f.App.Gateway, Store: keeping{f.App.Store, json.RawMessage(bad)}, Spool: f.App.Spool}
		first, err := keys.Invoke(ctx, bot, req, key)
		if err != nil || !first.Ran() || *runs != i+1 {
			t.Fatalf("first call: %+v %v (runs %d)", first, err, *runs)
		}
		var sent struct{ AuditID string }
		_ = json.Unmarshal(first.Body, &sent)
		ans, err := f.App.Idempotency.Invoke(ctx, bot, req, key)
		var fe *fault.Error
		if !errors.As(err, &fe) || fe.Code != idempotency.CodeResultUnreadable || fe.Kind != fault.Internal || fe.AuditID != sent.AuditID ||
			ans.Status != 0 || *runs != i+1 {
			t.Fatalf("replay over %s = %d %s, %v (runs %d); want %s naming %s, nothing run", bad, ans.Status, ans.Body, err, *runs,
				idempotency.CodeResultUnreadable, sent.AuditID)
		}
		linked, err := f.App.Store.ListAudit(ctx, store.AuditQuery{Org: bot.Org, ParentID: sent.AuditID})
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range linked {
			if rec.Outcome == gateway.OutcomeReplayed {
				t.Fatalf("a replay recorded as answered over an unreadable result: %+v", rec)
			}
		}
	}
}

// TestReplayIsDecidedAgain: a retry under a key is decided again under the policy serving
// now. After a re-grant that leaves the subject out, it is the policy's refusal (403, its
// reason code, its own denied record linked to the first call), never the stored answer, and
// nothing runs; the key keeps the first answer, so once the subject is granted again the
// replay is that answer, byte for byte.
func TestReplayIsDecidedAgain(t *testing.T) {
	var runs atomic.Int64
	f := apptest.New(t, apptest.Options{Provider: func(w http.ResponseWriter, _ *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"commentId":"c-redecided"}`))
	}})
	keys, ctx := f.App.Idempotency, context.Background()
	ec := apptest.Exec("agent:support-bot", "project", "")
	req := gateway.Request{Ref: commentRef, Input: comment}
	const key = "redecide-key-1"
	first, err := keys.Invoke(ctx, ec, req, key)
	if err != nil || first.Status != http.StatusOK || first.Replayed || !bytes.Contains(first.Body, []byte(`"commentId":"c-redecided"`)) {
		t.Fatalf("first call: %d %s %v", first.Status, first.Body, err)
	}
	var firstRec struct{ AuditID string }
	_ = json.Unmarshal(first.Body, &firstRec)

	f.Regrant(t, map[string]any{commentRef: map[string]any{"subjects": []string{"agent:someone-else"}}})
	denied, err := keys.Invoke(ctx, ec, req, key)
	if err != nil || denied.Status != http.StatusForbidden || denied.Replayed || bytes.Contains(denied.Body, []byte("c-redecided")) ||
		!bytes.Contains(denied.Body, []byte(`"SUBJECT_NOT_COVERED"`)) {
		t.Fatalf("the replay after the subject's grant was withdrawn: %d replayed=%v %s %v; want 403 SUBJECT_NOT_COVERED without the stored answer",
			denied.Status, denied.Replayed, denied.Body, err)
	}
	linked, err := f.App.Store.ListAudit(ctx, store.AuditQuery{Org: ec.Org, ParentID: firstRec.AuditID})
	if err != nil {
		t.Fatal(err)
	}
	var deniedIDs []string
	for _, rec := range linked {
		if rec.Decision == "denied" && rec.SubjectRef == ec.Subject.Ref {
			deniedIDs = append(deniedIDs, rec.ID)
		}
	}
	var deniedAns struct{ AuditID string }
	_ = json.Unmarshal(denied.Body, &deniedAns)
	if len(deniedIDs) != 1 || deniedIDs[0] != deniedAns.AuditID {
		t.Fatalf("denied records linked to the first call: %v; want the refused replay's own, %s", deniedIDs, deniedAns.AuditID)
	}

	f.Regrant(t, nil)
	again, err := keys.Invoke(ctx, ec, req, key)
	if err != nil || again.Status != first.Status || !again.Replayed || !bytes.Equal(again.Body, first.Body) || runs.Load() != 1 {
		t.Fatalf("the replay once granted again: %d replayed=%v %s %v (runs %d); want the first answer, byte for byte, nothing run",
			again.Status, again.Replayed, again.Body, err, runs.Load())
	}
}

// kernelWith is the funnel's kernel with ref served by h instead; a nil h serves ref by no
// handler, so the funnel's resolvers are asked for it.
type kernelWith struct {
	gateway.Handlers
	ref string
	h   kernel.Handler
}

func (k kernelWith) Handler(ref string) (kernel.Handler, bool) {
	if ref == k.ref {
		return k.h, k.h != nil
	}
	return k.Handlers.Handler(ref)
}

// warmingUp resolves ref to run, refusing the first call with a code no package declares:
// a dependency of a resolver that is not up yet (a fault injected before dispatch).
type warmingUp struct {
	ref     string
	run     kernel.Handler
	refused atomic.Bool
}

func (w *warmingUp) Resolve(_ context.Context, _ identity.ExecContext, e *catalog.Entry) (runner.Runner, bool, error) {
	if e.Ref() != w.ref {
		return nil, false, nil
	}
	if !w.refused.Swap(true) {
		return nil, false, fault.New(fault.Unavailable, "RESOLVER_WARMING_UP", "the resolver is not ready; retry shortly")
	}
	return runner.Kernel{Handler: w.run}, true, nil
}

// TestReleaseFollowsDispatch: whether a key is released is where the call got to, not its
// code. A refusal before the call is dispatched releases the key though its code is new to
// every list, so the retry runs; a failure after it keeps the key though its code is one a
// refusal before dispatch also answers (STORE_UNAVAILABLE), so the retry replays and the
// call, which may have done its work, never runs twice.
func TestReleaseFollowsDispatch(t *testing.T) {
	const ref = admin.RefBiomeList
	for _, tc := range []struct {
		name     string
		deps     func(d *gateway.Deps, run kernel.Handler)
		fails    error // the handler's answer, once it has done its work
		code     string
		runs     int32 // how many times the handler ran, after the retry
		replayed bool
	}{
		{name: "a new refusal before dispatch", code: "RESOLVER_WARMING_UP", runs: 1,
			deps: func(d *gateway.Deps, run kernel.Handler) {
				d.Kernel = kernelWith{Handlers: d.Kernel, ref: ref}
				d.Resolvers = append(d.Resolvers, &warmingUp{ref: ref, run: run})
			}},
		{name: "a failure after dispatch", code: fault.CodeStoreUnavailable, runs: 1, replayed: true,
			deps:  func(d *gateway.Deps, run kernel.Handler) { d.Kernel = kernelWith{Handlers: d.Kernel, ref: ref, h: run} },
			fails: fault.New(fault.Unavailable, fault.CodeStoreUnavailable, "the store failed after the work was done")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := apptest.New(t, apptest.Options{})
			var runs atomic.Int32
			run := func(context.Context, kernel.Call) (any, error) {
				if runs.Add(1); tc.fails != nil {
					return nil, tc.fails
				}
				return map[string]any{"biomes": []any{}}, nil
			}
			keys := keysOver(t, f, func(d *gateway.Deps) { tc.deps(d, run) })
			ctx, alice := context.Background(), apptest.Exec("user:alice", "org", "org_admin")
			req := gateway.Request{Ref: ref, Input: json.RawMessage(`{}`)}
			first, err := keys.Invoke(ctx, alice, req, "dispatch-key")
			var body struct{ Code string }
			_ = json.Unmarshal(first.Body, &body)
			if err != nil || first.Status != http.StatusServiceUnavailable || body.Code != tc.code {
				t.Fatalf("first call: %d %s %v; want 503 %s", first.Status, first.Body, err, tc.code)
			}
			retry, err := keys.Invoke(ctx, alice, req, "dispatch-key")
			if err != nil || retry.Replayed != tc.replayed || runs.Load() != tc.runs {
				t.Fatalf("retry under the key: %d %s replayed=%v %v (runs %d); want replayed=%v, runs %d", retry.Status, retry.Body,
					retry.Replayed, err, runs.Load(), tc.replayed, tc.runs)
			}
			if !tc.replayed && !retry.Ran() {
				t.Fatalf("the retry of a released key did not run: %d %s", retry.Status, retry.Body)
			}
		})
	}
}
