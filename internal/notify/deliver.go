package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/telemetry"
)

// Delivery bounds: an event is tried at most MaxAttempts times, Backoff(n) apart, each
// attempt within AttemptTimeout; a claimed event is another replica's to try once Lease has
// passed.
const (
	MaxAttempts    = 10
	AttemptTimeout = 10 * time.Second
	Lease          = time.Minute
	// Every is how often the outbox is looked at when nothing wakes the deliverer sooner.
	Every     = time.Second
	batchSize = 32
	parallel  = 8
	// PruneAfter is how long delivered and failed events stay in the outbox.
	PruneAfter = 7 * 24 * time.Hour
)

// Backoff is the wait after the n-th failed attempt (n >= 1): 1 s, doubling, at most 15 min.
// Ten attempts span about 8.5 minutes.
func Backoff(n int) time.Duration {
	d := time.Second
	for i := 1; i < n && d < 15*time.Minute; i++ {
		d *= 2
	}
	return min(d, 15*time.Minute)
}

// Sender sends a chat message through an org's connector:channel.send-message@1 binding.
type Sender interface {
	SendMessage(ctx context.Context, org, conversation, text string) error
}

// Deliverer drains the approval_events outbox.
type Deliverer struct {
	Config Config
	Store  store.ApprovalEventStore
	// HTTP is the egress-checked outbound client (no redirects followed).
	HTTP *http.Client
	Chat Sender
	// Replica names this process's claims; stable across restarts, so a restarted replica
	// takes back its own claims at once.
	Replica string
	// Now is the clock; nil is time.Now.
	Now func() time.Time

	once sync.Once
	wake chan struct{}
}

func (d *Deliverer) init() { d.once.Do(func() { d.wake = make(chan struct{}, 1) }) }

func (d *Deliverer) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// Kick wakes the deliverer: events were just queued.
func (d *Deliverer) Kick() {
	d.init()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run delivers due events until ctx ends, woken by Kick or every Every.
func (d *Deliverer) Run(ctx context.Context) {
	d.init()
	t := time.NewTicker(Every)
	defer t.Stop()
	for {
		for {
			n, err := d.Round(ctx)
			if err != nil && ctx.Err() == nil {
				slog.Warn("approval notifications: outbox unavailable; retrying", "err", err)
			}
			if n < batchSize || err != nil {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-t.C:
		}
	}
}

// Round claims the due events (its own earlier claims too: rounds run one at a time, so none
// of them is in flight here) and tries each once, at most parallel at a time. It returns how
// many it claimed.
func (d *Deliverer) Round(ctx context.Context) (int, error) {
	now := d.now()
	evs, err := d.Store.ClaimApprovalEvents(ctx, d.Replica, now, now.Add(Lease), batchSize)
	if err != nil {
		return 0, err
	}
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, e := range evs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			d.attempt(ctx, e)
		}()
	}
	wg.Wait()
	return len(evs), nil
}

// attempt tries one event once and records how it went.
func (d *Deliverer) attempt(ctx context.Context, e store.ApprovalEvent) {
	channel := "webhook"
	if strings.HasPrefix(e.Target, targetChat) {
		channel = "chat"
	}
	actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
	err := d.deliver(actx, e)
	cancel()
	if ctx.Err() != nil {
		return // shutting down: the claim lapses, and this replica takes it back at its next start
	}
	end := store.ApprovalEventEnd{ID: e.ID, Holder: d.Replica, At: d.now(), Status: store.EventDelivered}
	result := "delivered"
	var perm *permanent
	switch {
	case err == nil:
	case errors.As(err, &perm) || e.Attempts+1 >= MaxAttempts:
		end.Status, end.LastError, result = store.EventFailed, clip(err.Error()), "failed"
		slog.Error("approval notification given up", "event", e.ID, "approval", e.ApprovalID, "kind", e.Kind,
			"channel", channel, "attempts", e.Attempts+1, "err", err)
	default:
		end.Status, end.LastError, result = store.EventPending, clip(err.Error()), "retried"
		end.NextAt = end.At.Add(Backoff(e.Attempts + 1))
	}
	telemetry.ApprovalNotification(channel, result)
	if err := d.Store.EndApprovalEvent(context.WithoutCancel(ctx), end); err != nil {
		slog.Warn("approval notification: its attempt was not recorded; it will be tried again", "event", e.ID, "err", err)
	}
}

// permanent is a failure no retry can fix (the target is no longer configured).
type permanent struct{ msg string }

func (p *permanent) Error() string { return p.msg }

func (d *Deliverer) deliver(ctx context.Context, e store.ApprovalEvent) error {
	if conv, ok := strings.CutPrefix(e.Target, targetChat); ok {
		return d.chat(ctx, e, conv)
	}
	for _, w := range d.Config.Webhooks {
		if webhookTarget(w.URL) == e.Target && (w.Org == "" || w.Org == e.Org) {
			return d.post(ctx, w, e)
		}
	}
	return &permanent{"the webhook of this event is no longer configured"}
}

func (d *Deliverer) post(ctx context.Context, w Webhook, e store.ApprovalEvent) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(e.Body))
	if err != nil {
		return &permanent{fmt.Sprintf("webhook request: %v", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "xema-approvals")
	req.Header.Set("X-Xema-Event", e.Kind)
	req.Header.Set("X-Xema-Delivery", e.ID)
	req.Header.Set("X-Xema-Signature", Sign(w.Secret, d.now().Unix(), e.Body))
	resp, err := d.HTTP.Do(req)
	if err != nil {
		if de, ok := egress.Denied(err); ok {
			return fmt.Errorf("webhook %s: %s", redact(w.URL), de.Error())
		}
		var ue *url.Error
		if errors.As(err, &ue) { // its text repeats the URL, whose query may hold a token
			err = ue.Err
		}
		return fmt.Errorf("webhook %s: %w", redact(w.URL), err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook %s answered %d", redact(w.URL), resp.StatusCode)
	}
	return nil
}

func (d *Deliverer) chat(ctx context.Context, e store.ApprovalEvent, conv string) error {
	configured := false
	for _, c := range d.Config.Chats {
		configured = configured || (c.Org == e.Org && c.Conversation == conv)
	}
	if !configured || d.Chat == nil {
		return &permanent{"the chat conversation of this event is no longer configured"}
	}
	var p Payload
	if err := json.Unmarshal(e.Body, &p); err != nil {
		return &permanent{fmt.Sprintf("event body: %v", err)}
	}
	return d.Chat.SendMessage(ctx, e.Org, conv, Message(p))
}

// Message is the chat text of an event.
func Message(p Payload) string {
	what := fmt.Sprintf("%s's call of %s (risk %s, environment %s)", p.Requester, p.Ref, or(p.RiskTier, "unknown"), p.Environment)
	var s string
	switch p.Event {
	case KindHeld:
		s = fmt.Sprintf("Approval needed: %s waits until %s.", what, p.ExpiresAt)
	case KindDecided:
		s = fmt.Sprintf("Approval %s: %s was %s by %s.", p.ApprovalID, what, p.Status, p.DecidedBy)
	case KindExpired:
		s = fmt.Sprintf("Approval %s: %s expired undecided; it will never run.", p.ApprovalID, what)
	default:
		s = fmt.Sprintf("Approval %s: %s was %s by its requester.", p.ApprovalID, what, p.Event)
	}
	return s + " " + p.ConsoleURL
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// clip bounds an error kept in the outbox.
func clip(s string) string {
	if len(s) > 500 {
		return s[:500]
	}
	return s
}
