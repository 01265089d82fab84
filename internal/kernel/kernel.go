// Package kernel holds the in-process capability handlers of the gateway. Two ways in:
//
//   - Register: the spec's decorator path. A Go handler with its FULL contribution descriptor,
//     picked up by the boot-time Scan; the descriptor is validated exactly like a contribution
//     file, and a partial one is skipped with a logged reason, never defaulted.
//   - Serve: a live runner for a ref that a biome declares in its own contribution files.
package kernel

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/manifest"
)

// Call is what a handler receives: the validated input and who asked.
type Call struct {
	Ref     string
	Input   json.RawMessage
	Exec    identity.ExecContext
	AuditID string
	// TxnToken is the signed trusted context of a critical operation (internal/txntoken),
	// sent to the provider as the Txn-Token header; "" when the capability declares none.
	TxnToken string
}

// Handler runs one capability in-process. Its result is marshalled as the call's output.
type Handler func(ctx context.Context, call Call) (any, error)

// Registration is a Go-registered capability: its contribution (the same JSON object a
// contribution file holds) and its handler.
type Registration struct {
	Contribution json.RawMessage
	Handler      Handler
}

// Registry collects registrations and live runners. The zero value is not usable; use New.
type Registry struct {
	mu            sync.RWMutex
	registrations []Registration
	runners       map[string]Handler
}

// New returns an empty registry.
func New() *Registry { return &Registry{runners: map[string]Handler{}} }

// Register queues a Go-registered capability for the boot-time scan.
func (r *Registry) Register(reg Registration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.registrations = append(r.registrations, reg)
}

// RegisterFiles queues one registration per descriptor file of fsys (an embedded
// contributions/ directory), each with its handler.
func (r *Registry) RegisterFiles(fsys fs.ReadFileFS, handlers map[string]Handler) error {
	for file, h := range handlers {
		raw, err := fsys.ReadFile(file)
		if err != nil {
			return fmt.Errorf("kernel descriptor %s: %w", file, err)
		}
		r.Register(Registration{Contribution: raw, Handler: h})
	}
	return nil
}

// Serve installs a live runner for ref. Serving a ref twice is a programming error.
func (r *Registry) Serve(ref string, h Handler) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.runners[ref]; ok {
		return fmt.Errorf("kernel: a runner for %s is already installed", ref)
	}
	r.runners[ref] = h
	return nil
}

// Handler returns the in-process handler serving ref, if any.
func (r *Registry) Handler(ref string) (Handler, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.runners[ref]
	return h, ok
}

// Refs lists the refs with a live handler, sorted.
func (r *Registry) Refs() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	refs := make([]string, 0, len(r.runners))
	for ref := range r.runners {
		refs = append(refs, ref)
	}
	sort.Strings(refs)
	return refs
}

// Skipped names a registration the scan left out and why.
type Skipped struct {
	Ref    string
	Reason string
}

// Accepted is a registration that passed the scan, with its validated contribution.
type Accepted struct {
	Contribution manifest.Contribution
	Raw          json.RawMessage
}

// Scan validates every queued registration exactly like a contribution file. Valid ones
// become live runners and are returned for publishing; a partial or invalid descriptor is
// skipped with reasons naming each missing or bad field, never defaulted.
func (r *Registry) Scan() (accepted []Accepted, skipped []Skipped) {
	r.mu.Lock()
	regs := r.registrations
	r.registrations = nil
	r.mu.Unlock()
	for _, reg := range regs {
		c, problems := manifest.ValidateContribution("kernel registration", reg.Contribution)
		reasons := make([]string, 0, len(problems)+1)
		for _, p := range problems {
			reasons = append(reasons, p.Path+": "+p.Message)
		}
		if reg.Handler == nil {
			reasons = append(reasons, "no handler")
		}
		ref := refOf(reg.Contribution)
		if len(reasons) > 0 {
			skipped = append(skipped, Skipped{Ref: ref, Reason: strings.Join(reasons, "; ")})
			continue
		}
		if err := r.Serve(ref, reg.Handler); err != nil {
			skipped = append(skipped, Skipped{Ref: ref, Reason: err.Error()})
			continue
		}
		accepted = append(accepted, Accepted{Contribution: c, Raw: reg.Contribution})
	}
	return accepted, skipped
}

// refOf reads the ref of a descriptor even when the descriptor is invalid, to name it.
func refOf(raw json.RawMessage) string {
	var d struct {
		Manifest struct {
			Ref string `json:"ref"`
		} `json:"manifest"`
	}
	if json.Unmarshal(raw, &d) != nil || d.Manifest.Ref == "" {
		return "(no ref)"
	}
	return d.Manifest.Ref
}
