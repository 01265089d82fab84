// Package demo serves the demo biome (biomes/demo) with in-process handlers: a small
// built-in knowledge-base page store, a workflow starter that queues runs, and a chat outbox.
// They exist so a fresh `make run` can show a real invoke, denial and why-denied without any
// external provider; the outbox keeps messages in memory and delivers them nowhere.
package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/runner"
)

var pages = map[string]struct{ Title, Body string }{
	"welcome":  {"Welcome", "# Welcome\nStart with the handbook, then say hi in #general."},
	"handbook": {"Handbook", "# Handbook\nWe ship small changes, review each other's work and write things down."},
	"oncall":   {"On-call", "# On-call\nPage the primary first; escalate after 15 minutes."},
}

// Outbox records the messages the demo chat connector "sent".
type Outbox struct {
	mu       sync.Mutex
	Messages []Message
}

// Message is one sent message.
type Message struct {
	MessageID    string `json:"messageId"`
	Conversation string `json:"conversation"`
	Text         string `json:"-"`
	SentAt       string `json:"sentAt"`
}

// Serve installs the demo runners into reg and returns the chat outbox.
func Serve(reg *kernel.Registry) (*Outbox, error) {
	out := &Outbox{}
	for ref, h := range map[string]kernel.Handler{
		"kb:page.read@1":                   readPage,
		"workflow:run.start@1":             startRun,
		"connector:channel.send-message@1": out.send,
	} {
		if err := reg.Serve(ref, h); err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
	}
	return out, nil
}

func readPage(_ context.Context, call kernel.Call) (any, error) {
	var in struct {
		PageID string `json:"pageId"`
	}
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return nil, fmt.Errorf("decode validated input: %w", err)
	}
	p, ok := pages[in.PageID]
	if !ok {
		return nil, runner.ClientError(http.StatusNotFound, "PAGE_NOT_FOUND", "no knowledge-base page %q", in.PageID)
	}
	return map[string]string{"pageId": in.PageID, "title": p.Title, "body": p.Body}, nil
}

func startRun(_ context.Context, call kernel.Call) (any, error) {
	var in struct {
		WorkflowID string `json:"workflowId"`
	}
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return nil, fmt.Errorf("decode validated input: %w", err)
	}
	return map[string]string{"runId": "run_" + randomHex(), "workflowId": in.WorkflowID, "status": "queued"}, nil
}

func (o *Outbox) send(_ context.Context, call kernel.Call) (any, error) {
	var in struct {
		Conversation string `json:"conversation"`
		Text         string `json:"text"`
	}
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return nil, fmt.Errorf("decode validated input: %w", err)
	}
	m := Message{MessageID: "msg_" + randomHex(), Conversation: in.Conversation, Text: in.Text,
		SentAt: time.Now().UTC().Format(time.RFC3339)}
	o.mu.Lock()
	o.Messages = append(o.Messages, m)
	o.mu.Unlock()
	return m, nil
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
