// Package demo serves the demo biome (biomes/demo) with in-process handlers: a small
// built-in knowledge-base page store and a workflow starter that queues runs. They exist so a
// fresh `make run` can show a real invoke, denial and why-denied without any external
// provider. The demo's connector:channel.send-message@1 is served by the chat connectors
// through a conversation binding (internal/binding), never by a stand-in.
package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/runner"
)

var pages = map[string]struct{ Title, Body string }{
	"welcome":  {"Welcome", "# Welcome\nStart with the handbook, then say hi in #general."},
	"handbook": {"Handbook", "# Handbook\nWe ship small changes, review each other's work and write things down."},
	"oncall":   {"On-call", "# On-call\nPage the primary first; escalate after 15 minutes."},
}

// BiomeID is the id of the demo biome (biomes/demo) these runners serve.
const BiomeID = "demo"

// Serve installs the demo runners into reg.
func Serve(reg *kernel.Registry) error {
	for ref, h := range map[string]kernel.Handler{
		"kb:page.read@1":       readPage,
		"workflow:run.start@1": startRun,
	} {
		if err := reg.Serve(ref, h); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	return nil
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

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
