package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/notify"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/engine"
)

var secret = []byte("0123456789abcdef-webhook-secret")

func TestSignVerify(t *testing.T) {
	body := []byte(`{"event":"held"}`)
	now := time.Unix(1_800_000_000, 0)
	h := notify.Sign(secret, now.Unix(), body)
	if !strings.HasPrefix(h, "t=1800000000,v1=") || len(h) != len("t=1800000000,v1=")+64 {
		t.Fatalf("header %q: want t=<unix>,v1=<64 hex>", h)
	}
	if err := notify.Verify(secret, h, body, now, 5*time.Minute); err != nil {
		t.Fatalf("verify its own signature: %v", err)
	}
	for name, tc := range map[string]struct {
		secret []byte
		header string
		body   string
		now    time.Time
	}{
		"another secret":     {[]byte("another-secret-of-16+"), h, string(body), now},
		"another body":       {secret, h, `{"event":"decided"}`, now},
		"too old":            {secret, h, string(body), now.Add(6 * time.Minute)},
		"no v1":              {secret, "t=1800000000", string(body), now},
		"timestamp replaced": {secret, strings.Replace(h, "t=1800000000", "t=1800000001", 1), string(body), now},
	} {
		if err := notify.Verify(tc.secret, tc.header, []byte(tc.body), tc.now, 5*time.Minute); err == nil {
			t.Errorf("%s: verified; want refused", name)
		}
	}
}

// TestSignKnownAnswer: the signature is HMAC-SHA256 keyed by the secret over "<t>.<body>",
// hex, as a receiver computes it by hand (the values below were computed apart, with
// Python's hmac): a change of key, message layout or encoding shows here.
func TestSignKnownAnswer(t *testing.T) {
	for _, tc := range []struct {
		secret, body string
		t            int64
		want         string
	}{
		{string(secret), `{"event":"held"}`, 1_800_000_000,
			"t=1800000000,v1=8547b0975086ebb986727ac154058ab083c0f10103c868818b260cafc6f20abd"},
		{"whsec_known_answer_test", `{"approvalId":"apr_1"}`, 1_700_000_000,
			"t=1700000000,v1=ab83ab381e560817b4b54f530fe716a439e5194da6b76dad6715225da4c81a88"},
	} {
		if got := notify.Sign([]byte(tc.secret), tc.t, []byte(tc.body)); got != tc.want {
			t.Errorf("Sign(%q, %d, %s) = %s, want %s", tc.secret, tc.t, tc.body, got, tc.want)
		}
		if err := notify.Verify([]byte(tc.secret), tc.want, []byte(tc.body), time.Unix(tc.t, 0), time.Minute); err != nil {
			t.Errorf("Verify of the known signature %s: %v", tc.want, err)
		}
	}
}

func TestBackoffIsBounded(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	for i, w := range want {
		if got := notify.Backoff(i + 1); got != w {
			t.Errorf("Backoff(%d) = %v, want %v", i+1, got, w)
		}
	}
	if got := notify.Backoff(100); got != 15*time.Minute {
		t.Errorf("Backoff(100) = %v, want the cap 15m", got)
	}
}

func TestKind(t *testing.T) {
	for to, want := range map[string]string{store.ApprovalPending: notify.KindHeld, store.ApprovalApproved: notify.KindDecided,
		store.ApprovalRejected: notify.KindDecided, store.ApprovalExpired: notify.KindExpired,
		store.ApprovalWithdrawn: notify.KindWithdrawn, store.ApprovalRunning: "", store.ApprovalDone: ""} {
		if got := notify.Kind(to); got != want {
			t.Errorf("Kind(%s) = %q, want %q", to, got, want)
		}
	}
}

func held() store.Approval {
	now := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	return store.Approval{ID: "apr_aaaaaaaaaaaaaaaa", Org: "acme", AuditID: "inv_1", Ref: "ticket:comment.add@1", Biome: "ticketing",
		BiomeVersion: "1.1.0", PolicyRevision: "rev-1", RiskTier: "high", RequesterRef: "agent:bot", Environment: "project",
		Exec: json.RawMessage(`{}`), Input: json.RawMessage(`{"text":"secret plan"}`), Status: store.ApprovalPending,
		CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
}

// Events go to the webhooks of every org and of the approval's org, and to its org's chats;
// the input only to a webhook that opted in.
func TestEventsPerTarget(t *testing.T) {
	cfg := notify.Config{ConsoleURL: "https://xema.example/", Webhooks: []notify.Webhook{
		{URL: "https://all.example/hook", Secret: secret},
		{URL: "https://acme.example/hook", Org: "acme", Secret: secret, IncludeInput: true},
		{URL: "https://globex.example/hook", Org: "globex", Secret: secret},
	}, Chats: []notify.Chat{{Org: "acme", Conversation: "approvers"}, {Org: "globex", Conversation: "ops"}}}
	a := held()
	evs := cfg.Events(a, notify.KindHeld, a.CreatedAt)
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3 (all, acme, acme's chat): %+v", len(evs), evs)
	}
	targets := map[string]notify.Payload{}
	for _, e := range evs {
		var p notify.Payload
		if err := json.Unmarshal(e.Body, &p); err != nil {
			t.Fatal(err)
		}
		if e.ID != p.EventID || e.ApprovalID != a.ID || e.Org != "acme" || e.Kind != notify.KindHeld {
			t.Errorf("event %+v / payload %+v disagree", e, p)
		}
		if strings.Contains(e.Target, "example") {
			t.Errorf("target %q holds the URL; the store must not", e.Target)
		}
		targets[e.Target] = p
	}
	var withInput int
	for target, p := range targets {
		if p.Ref != a.Ref || p.Requester != "agent:bot" || p.Environment != "project" || p.RiskTier != "high" ||
			p.ExpiresAt != "2026-12-02T07:00:00Z" || p.ConsoleURL != "https://xema.example/console/approvals/"+a.ID ||
			p.BiomeVersion != "1.1.0" || p.PolicyRevision != "rev-1" {
			t.Errorf("%s: payload %+v", target, p)
		}
		if p.Input != nil {
			withInput++
		}
	}
	if withInput != 1 {
		t.Errorf("%d events carry the input, want only the opted-in webhook's", withInput)
	}
	if evs := cfg.Events(a, "", a.CreatedAt); evs != nil {
		t.Errorf("a move nobody is told of queued %d events", len(evs))
	}
}

func TestConfigValidate(t *testing.T) {
	allow := func(string) string { return "" }
	for name, c := range map[string]notify.Config{
		"no secret":        {Webhooks: []notify.Webhook{{URL: "https://h.example/x"}}},
		"not a URL":        {Webhooks: []notify.Webhook{{URL: "hooks.example", Secret: secret}}},
		"ftp":              {Webhooks: []notify.Webhook{{URL: "ftp://h.example/x", Secret: secret}}},
		"chat without org": {Chats: []notify.Chat{{Conversation: "c"}}},
	} {
		if err := c.Validate(allow); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c := notify.Config{Webhooks: []notify.Webhook{{URL: "http://169.254.169.254/hook?token=s3cret", Secret: secret}}}
	err := c.Validate(func(string) string { return "metadata address" })
	if err == nil || !strings.Contains(err.Error(), "metadata address") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("an egress-refused webhook: %v; want refused, naming why, without its query", err)
	}
}

// receiver is a webhook that checks every signature and answers the statuses it is given
// in turn, then 200.
type receiver struct {
	mu       sync.Mutex
	statuses []int
	bodies   []string
	bad      int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := notify.Verify(secret, req.Header.Get("X-Xema-Signature"), body, time.Now(), 5*time.Minute); err != nil ||
		req.Header.Get("X-Xema-Delivery") == "" {
		r.bad++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	status := http.StatusOK
	if len(r.statuses) > 0 {
		status, r.statuses = r.statuses[0], r.statuses[1:]
	}
	r.bodies = append(r.bodies, string(body))
	w.WriteHeader(status)
}

func (r *receiver) seen() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bodies), r.bad
}

// A webhook that answers 500 twice is retried after each backoff and delivered on the
// third attempt; nothing is tried before it is due, and nothing after it is delivered.
func TestDeliverRetriesWithBackoff(t *testing.T) {
	ctx := context.Background()
	st, err := engine.Open(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rcv := &receiver{statuses: []int{500, 500}}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	clock := time.Now()
	d := &notify.Deliverer{Config: notify.Config{ConsoleURL: "http://xema", Webhooks: []notify.Webhook{{URL: srv.URL + "/hook", Secret: secret}}},
		Store: st, HTTP: egress.New(egress.Loopback()).Client(nil), Replica: "r1", Now: func() time.Time { return clock }}
	a := held()
	a.CreatedAt, a.ExpiresAt = clock, clock.Add(time.Hour)
	if err := st.PutApproval(ctx, a, d.Events(a, notify.KindHeld, clock)...); err != nil {
		t.Fatal(err)
	}
	round := func(want int) {
		t.Helper()
		if n, err := d.Round(ctx); err != nil || n != want {
			t.Fatalf("round at +%v: claimed %d, %v; want %d", clock.Sub(a.CreatedAt), n, err, want)
		}
	}
	round(1) // 500
	round(0) // not due before its backoff
	clock = clock.Add(notify.Backoff(1))
	round(1) // 500
	clock = clock.Add(notify.Backoff(2) - time.Millisecond)
	round(0)
	clock = clock.Add(time.Millisecond)
	round(1) // 200
	clock = clock.Add(time.Hour)
	round(0)
	if got, bad := rcv.seen(); got != 3 || bad != 0 {
		t.Fatalf("receiver saw %d signed attempts (%d badly signed); want 3, all signed", got, bad)
	}
	var p notify.Payload
	if err := json.Unmarshal([]byte(rcv.bodies[2]), &p); err != nil || p.ApprovalID != a.ID || p.Event != notify.KindHeld || p.Input != nil {
		t.Fatalf("delivered body %s: want the held event without input", rcv.bodies[2])
	}
}

// A webhook the egress policy refuses is never reached, and its attempts are bounded.
func TestDeliverEgressRefusedIsBounded(t *testing.T) {
	ctx := context.Background()
	st, err := engine.Open(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	clock := time.Now()
	d := &notify.Deliverer{Config: notify.Config{Webhooks: []notify.Webhook{{URL: srv.URL, Secret: secret}}},
		Store: st, HTTP: egress.New(nil).Client(nil), Replica: "r1", Now: func() time.Time { return clock }}
	a := held()
	a.CreatedAt, a.ExpiresAt = clock, clock.Add(time.Hour)
	if err := st.PutApproval(ctx, a, d.Events(a, notify.KindHeld, clock)...); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	for range notify.MaxAttempts + 3 {
		n, err := d.Round(ctx)
		if err != nil {
			t.Fatal(err)
		}
		attempts += n
		clock = clock.Add(notify.Backoff(notify.MaxAttempts))
	}
	if got, _ := rcv.seen(); got != 0 || attempts != notify.MaxAttempts {
		t.Fatalf("loopback refused: receiver reached %d times, %d attempts; want never, %d attempts", got, attempts, notify.MaxAttempts)
	}
}

func TestMessage(t *testing.T) {
	p := notify.Payload{Event: notify.KindHeld, ApprovalID: "apr_x", Ref: "ticket:comment.add@1", Requester: "agent:bot",
		Environment: "project", RiskTier: "high", ExpiresAt: "2026-12-02T07:00:00Z", ConsoleURL: "https://x/console/approvals/apr_x"}
	m := notify.Message(p)
	for _, want := range []string{"agent:bot", "ticket:comment.add@1", "high", "project", "2026-12-02T07:00:00Z", p.ConsoleURL} {
		if !strings.Contains(m, want) {
			t.Errorf("message %q lacks %q", m, want)
		}
	}
	p.Event, p.Status, p.DecidedBy = notify.KindDecided, "rejected", "user:ann"
	if m := notify.Message(p); !strings.Contains(m, "rejected by user:ann") {
		t.Errorf("decided message %q", m)
	}
}

// claims is the real outbox, keeping the events each round claimed.
type claims struct {
	store.ApprovalEventStore
	claimed []store.ApprovalEvent
}

func (c *claims) ClaimApprovalEvents(ctx context.Context, holder string, now, leaseUntil time.Time, limit int) ([]store.ApprovalEvent, error) {
	evs, err := c.ApprovalEventStore.ClaimApprovalEvents(ctx, holder, now, leaseUntil, limit)
	c.claimed = append(c.claimed, evs...)
	return evs, err
}

// A webhook answering 4xx (unauthorized, not found, gone) did not take the event: it is not
// delivered but retried after its backoff, its answer kept as the attempt's error, and
// delivered once the receiver answers 200.
func TestDeliverRetriesClientErrors(t *testing.T) {
	for _, status := range []int{http.StatusUnauthorized, http.StatusNotFound, http.StatusGone} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			ctx := context.Background()
			st, err := engine.Open(ctx, "", t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			rcv := &receiver{statuses: []int{status}}
			srv := httptest.NewServer(rcv)
			t.Cleanup(srv.Close)
			clock := time.Now()
			outbox := &claims{ApprovalEventStore: st}
			d := &notify.Deliverer{Config: notify.Config{Webhooks: []notify.Webhook{{URL: srv.URL, Secret: secret}}},
				Store: outbox, HTTP: egress.New(egress.Loopback()).Client(nil), Replica: "r1", Now: func() time.Time { return clock }}
			a := held()
			a.CreatedAt, a.ExpiresAt = clock, clock.Add(time.Hour)
			if err := st.PutApproval(ctx, a, d.Events(a, notify.KindHeld, clock)...); err != nil {
				t.Fatal(err)
			}
			for i, want := range []int{1, 0} { // answered status; not due again before its backoff
				if n, err := d.Round(ctx); err != nil || n != want {
					t.Fatalf("round %d: claimed %d, %v; want %d", i, n, err, want)
				}
			}
			clock = clock.Add(notify.Backoff(1))
			if n, err := d.Round(ctx); err != nil || n != 1 {
				t.Fatalf("after the backoff: claimed %d, %v; want the event retried", n, err)
			}
			retried := outbox.claimed[len(outbox.claimed)-1]
			if retried.Attempts != 1 || !strings.Contains(retried.LastError, fmt.Sprintf("answered %d", status)) {
				t.Fatalf("the retried event: %d attempt(s), last error %q; want 1, naming the answer %d", retried.Attempts, retried.LastError, status)
			}
			clock = clock.Add(time.Hour)
			if n, err := d.Round(ctx); err != nil || n != 0 {
				t.Fatalf("after its delivery: claimed %d, %v; want none", n, err)
			}
			if got, bad := rcv.seen(); got != 2 || bad != 0 {
				t.Fatalf("receiver saw %d signed attempts (%d badly signed); want 2", got, bad)
			}
		})
	}
}
