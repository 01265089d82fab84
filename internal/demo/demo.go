// Package demo serves the demo biome (biomes/demo) with in-process handlers: a small
// built-in knowledge-base page store (read, and publish: a call held for a person's
// approval) and a workflow starter that queues runs. They exist so a fresh `make run` can
// show a real invoke, denial, why-denied and approval without any external provider. The demo's connector:channel.send-message@1 is served by the chat connectors
// through a conversation binding (internal/binding), never by a stand-in.
package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/kernel"
)

type page struct{ Title, Body string }

// kb is the knowledge base of one gateway process: the built-in pages, and what was
// published since it started (kept in memory only: a demo, not a store).
type kb struct {
	mu    sync.RWMutex
	pages map[string]page
}

func newKB() *kb {
	return &kb{pages: map[string]page{
		"welcome":  {"Welcome", "# Welcome\nStart with the handbook, then say hi in #general."},
		"handbook": {"Handbook", "# Handbook\nWe ship small changes, review each other's work and write things down."},
		"oncall":   {"On-call", "# On-call\nPage the primary first; escalate after 15 minutes."},
	}}
}

// BiomeID is the id of the demo biome (biomes/demo) these runners serve.
const BiomeID = "demo"

// Serve installs the demo runners into reg.
func Serve(reg *kernel.Registry) error {
	pages := newKB()
	for ref, h := range map[string]kernel.Handler{
		"kb:page.read@1":       pages.read,
		"kb:page.publish@1":    pages.publish,
		"workflow:run.start@1": startRun,
	} {
		if err := reg.Serve(ref, h); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	return nil
}

func (k *kb) read(_ context.Context, call kernel.Call) (any, error) {
	var in struct {
		PageID string `json:"pageId"`
	}
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return nil, fmt.Errorf("decode validated input: %w", err)
	}
	k.mu.RLock()
	p, ok := k.pages[in.PageID]
	k.mu.RUnlock()
	if !ok {
		return nil, fault.New(fault.NotFound, "PAGE_NOT_FOUND", "no knowledge-base page %q", in.PageID)
	}
	return map[string]string{"pageId": in.PageID, "title": p.Title, "body": p.Body}, nil
}

func (k *kb) publish(_ context.Context, call kernel.Call) (any, error) {
	var in struct {
		PageID string `json:"pageId"`
		Title  string `json:"title"`
		Body   string `json:"body"`
	}
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return nil, fmt.Errorf("decode validated input: %w", err)
	}
	k.mu.Lock()
	k.pages[in.PageID] = page{in.Title, in.Body}
	k.mu.Unlock()
	return map[string]any{"pageId": in.PageID, "title": in.Title, "published": true}, nil
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

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
