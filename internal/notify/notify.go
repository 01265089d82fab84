// Package notify tells approvers that a call waits for them, and how it ended: for each step
// of an approval (held, decided, expired, withdrawn) it queues one event per target (an
// operator's webhook, an org's chat conversation) in the store's approval_events outbox, in
// the transaction of the step itself, then delivers the outbox at least once, retried with
// backoff, bounded, in the background: a notification never delays or fails the call.
//
// A webhook gets a JSON POST signed as Stripe signs its events:
// X-Xema-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">, keyed by the
// webhook's secret. A chat conversation gets a message through the org's
// connector:channel.send-message@1 binding.
package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/store"
)

// Event kinds: the step of the approval an event tells.
const (
	KindHeld      = "held"
	KindDecided   = "decided"
	KindExpired   = "expired"
	KindWithdrawn = "withdrawn"
)

// Kind is the event kind of an approval's move to state to, "" when the move is not told
// (a run's own states: running, dispatched, done, ...).
func Kind(to string) string {
	switch to {
	case store.ApprovalPending:
		return KindHeld
	case store.ApprovalApproved, store.ApprovalRejected:
		return KindDecided
	case store.ApprovalExpired:
		return KindExpired
	case store.ApprovalWithdrawn: // its requester cancelled it (MCP tasks/cancel)
		return KindWithdrawn
	}
	return ""
}

// Webhook is an operator's receiver of approval events.
type Webhook struct {
	URL string
	// Org limits the webhook to the approvals of one org; "" is every org.
	Org string
	// Secret keys the signature; never empty.
	Secret []byte
	// IncludeInput adds the held call's input to the events (the operator opted in).
	IncludeInput bool
}

// Chat is an org's conversation that hears approval events, through its
// connector:channel.send-message@1 binding.
type Chat struct {
	Org          string
	Conversation string
}

// Config is who is told. ConsoleURL is the console's base URL for deep links
// (<ConsoleURL>/console/approvals/<approvalId>).
type Config struct {
	Webhooks   []Webhook
	Chats      []Chat
	ConsoleURL string
}

// Validate checks the configuration; checkURL is the egress check of an outbound URL ("" when
// allowed, else why not).
func (c Config) Validate(checkURL func(raw string) string) error {
	for _, w := range c.Webhooks {
		u, err := url.Parse(w.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--approval-webhook %q: want an absolute http(s) URL", redact(w.URL))
		}
		if why := checkURL(w.URL); why != "" {
			return fmt.Errorf("--approval-webhook %q: %s", redact(w.URL), why)
		}
		if len(w.Secret) == 0 {
			return fmt.Errorf("--approval-webhook %q: no secret; set --approval-webhook-secret-file (or secret-file of the webhook in the config file): events are always signed", redact(w.URL))
		}
	}
	for _, ch := range c.Chats {
		if ch.Org == "" || ch.Conversation == "" {
			return fmt.Errorf("--approval-chat %q: want ORG=CONVERSATION", ch.Org+"="+ch.Conversation)
		}
	}
	return nil
}

// redact keeps a URL's scheme, host and path: its query may hold a token.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.RawQuery, u.User, u.Fragment = "", nil, ""
	return u.String()
}

// Payload is the JSON body of a webhook event.
type Payload struct {
	EventID        string          `json:"eventId"`
	Event          string          `json:"event"`
	OccurredAt     string          `json:"occurredAt"`
	ApprovalID     string          `json:"approvalId"`
	Org            string          `json:"org"`
	Ref            string          `json:"ref"`
	Biome          string          `json:"biome,omitempty"`
	BiomeVersion   string          `json:"biomeVersion,omitempty"`
	Requester      string          `json:"requester"`
	Environment    string          `json:"environment"`
	RiskTier       string          `json:"riskTier,omitempty"`
	Status         string          `json:"status"`
	DecidedBy      string          `json:"decidedBy,omitempty"`
	Reason         string          `json:"reason,omitempty"`
	PolicyRevision string          `json:"policyRevision,omitempty"`
	ExpiresAt      string          `json:"expiresAt"`
	ConsoleURL     string          `json:"consoleUrl"`
	Input          json.RawMessage `json:"input,omitempty"`
}

// Target prefixes of the outbox's rows. A webhook is named by a hash of its URL: the store
// never holds a URL that may carry a token.
const (
	targetWebhook = "webhook:"
	targetChat    = "chat:"
)

func webhookTarget(u string) string {
	sum := sha256.Sum256([]byte(u))
	return targetWebhook + hex.EncodeToString(sum[:8])
}

// Events are the outbox rows of a's step kind at at, one per target the org has; the
// approval's fields are as they are after the step.
func (c Config) Events(a store.Approval, kind string, at time.Time) []store.ApprovalEvent {
	if kind == "" {
		return nil
	}
	var out []store.ApprovalEvent
	add := func(target string, input json.RawMessage) {
		id := audit.RandomID("evt_")
		p := Payload{EventID: id, Event: kind, OccurredAt: at.UTC().Format(time.RFC3339Nano), ApprovalID: a.ID, Org: a.Org,
			Ref: a.Ref, Biome: a.Biome, BiomeVersion: a.BiomeVersion, Requester: a.RequesterRef, Environment: a.Environment,
			RiskTier: a.RiskTier, Status: a.Status, DecidedBy: a.DecidedBy, Reason: a.Reason, PolicyRevision: a.PolicyRevision,
			ExpiresAt: a.ExpiresAt.UTC().Format(time.RFC3339Nano), ConsoleURL: c.DeepLink(a.ID), Input: input}
		body, _ := json.Marshal(p) // strings and a stored JSON document always encode
		out = append(out, store.ApprovalEvent{ID: id, Org: a.Org, ApprovalID: a.ID, Kind: kind, Target: target, Body: body})
	}
	for _, w := range c.Webhooks {
		if w.Org == "" || w.Org == a.Org {
			var input json.RawMessage
			if w.IncludeInput {
				input = a.Input
			}
			add(webhookTarget(w.URL), input)
		}
	}
	for _, ch := range c.Chats {
		if ch.Org == a.Org {
			add(targetChat+ch.Conversation, nil)
		}
	}
	return out
}

// Events are the outbox rows of a step (approval.Notifier), for the configured targets.
func (d *Deliverer) Events(a store.Approval, kind string, at time.Time) []store.ApprovalEvent {
	return d.Config.Events(a, kind, at)
}

// DeepLink is the console page of an approval.
func (c Config) DeepLink(approvalID string) string {
	return strings.TrimSuffix(c.ConsoleURL, "/") + "/console/approvals/" + url.PathEscape(approvalID)
}

// Sign is the X-Xema-Signature header of body sent at unix second t.
func Sign(secret []byte, t int64, body []byte) string {
	ts := strconv.FormatInt(t, 10)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks an X-Xema-Signature header over body as a receiver does: a v1 signature
// that matches secret, made within tolerance of now.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return errors.New("signature header lacks t or v1")
	}
	if d := now.Sub(time.Unix(t, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("signature made %v from now, beyond the tolerance %v", d, tolerance)
	}
	want := Sign(secret, t, body)
	for _, s := range sigs {
		if hmac.Equal([]byte("t="+ts+",v1="+s), []byte(want)) {
			return nil
		}
	}
	return errors.New("no v1 signature matches")
}
