package app

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/notify"
	"github.com/xemahq/xema/internal/store"
)

// TestWebhookRedirectNotFollowed: the gateway's webhook deliverer goes out through the egress
// client, which follows no redirect: a receiver redirecting elsewhere does not take the
// event (it is retried), and where it points is never reached.
func TestWebhookRedirectNotFollowed(t *testing.T) {
	ctx := context.Background()
	var first, second atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { second.Add(1) }))
	t.Cleanup(elsewhere.Close)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first.Add(1)
		http.Redirect(w, r, elsewhere.URL+"/stolen", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(receiver.Close)
	clock := time.Now()
	a, err := New(ctx, Config{DataDir: t.TempDir(), EgressAllow: egress.Loopback(), Now: func() time.Time { return clock },
		Notify: notify.Config{Webhooks: []notify.Webhook{{URL: receiver.URL + "/hook", Secret: []byte("0123456789abcdef-webhook-secret")}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	held := store.Approval{ID: "apr_redirect000000", Org: "default", AuditID: "inv_1", Ref: "ticket:comment.add@1",
		RequesterRef: "agent:bot", Environment: "project", Exec: json.RawMessage(`{}`), Input: json.RawMessage(`{}`),
		Status: store.ApprovalPending, CreatedAt: clock, ExpiresAt: clock.Add(time.Hour)}
	if err := a.Store.PutApproval(ctx, held, a.Notify.Events(held, notify.KindHeld, clock)...); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if n, err := a.Notify.Round(ctx); err != nil || n != 1 {
			t.Fatalf("claimed %d, %v; want the event tried (a redirect is no delivery)", n, err)
		}
		clock = clock.Add(notify.Backoff(notify.MaxAttempts))
	}
	if first.Load() != 2 || second.Load() != 0 {
		t.Fatalf("the receiver was reached %d times, where it redirects to %d; want 2 and never", first.Load(), second.Load())
	}
}
