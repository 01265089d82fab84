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
	"sort"
	"sync"

	"github.com/xemahq/xema/internal/identity"
)

// Call is what a handler receives: the validated input and who asked.
type Call struct {
	Ref     string
	Input   json.RawMessage
	Exec    identity.ExecContext
	AuditID string
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

// Validator checks a contribution object and returns human-readable problems (empty = valid).
type Validator func(raw json.RawMessage) (ref string, problems []string)

// Skipped names a registration the scan left out and why.
type Skipped struct {
	Ref    string
	Reason string
}

// Scan validates every queued registration. Valid ones become live runners and are
// returned for publishing; invalid ones are skipped with their reasons.
func (r *Registry) Scan(validate Validator) (accepted []Registration, skipped []Skipped) {
	r.mu.Lock()
	regs := r.registrations
	r.registrations = nil
	r.mu.Unlock()
	for _, reg := range regs {
		ref, problems := validate(reg.Contribution)
		if reg.Handler == nil {
			problems = append(problems, "no handler")
		}
		if len(problems) > 0 {
			skipped = append(skipped, Skipped{Ref: ref, Reason: fmt.Sprint(problems)})
			continue
		}
		if err := r.Serve(ref, reg.Handler); err != nil {
			skipped = append(skipped, Skipped{Ref: ref, Reason: err.Error()})
			continue
		}
		accepted = append(accepted, reg)
	}
	return accepted, skipped
}
