package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/store"
)

// nextStates are the explicit lifecycle transitions an admin may make (spec: "Capability
// lifecycle"). Retiring needs a successor; deprecating may name one.
var nextStates = map[string][]string{
	store.LifecycleProposed:   {store.LifecycleSeeded},
	store.LifecycleSeeded:     {store.LifecyclePublished, store.LifecycleRetired},
	store.LifecyclePublished:  {store.LifecycleDeprecated, store.LifecycleRetired},
	store.LifecycleDeprecated: {store.LifecycleRetired, store.LifecyclePublished},
}

// Transition is one requested lifecycle move.
type Transition struct {
	Ref        string `json:"ref"`
	To         string `json:"to"`
	From       string `json:"from,omitempty"`
	ReplacedBy string `json:"replacedBy,omitempty"`
}

// Transition moves a ref to its next state, compare-and-set on the state it is in now, and
// records the event with its actor.
// Only the org owning the ref's biome moves it (for the operator's store: the operator's org);
// another org's ref is answered as unknown.
func (p *Publisher) Transition(ctx context.Context, t Transition, org, actor string) (Transition, error) {
	cur, err := p.Store.GetCapability(ctx, t.Ref)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return t, fmt.Errorf("lifecycle %s: %w", t.Ref, err)
	}
	owner, mine, oerr := p.ownedBy(ctx, cur.BiomeID, org)
	if oerr != nil {
		return t, fmt.Errorf("lifecycle %s: %w", t.Ref, oerr)
	}
	if errors.Is(err, store.ErrNotFound) || !mine {
		return t, fault.New(fault.NotFound, "UNKNOWN_CAPABILITY", "/ref: no capability %q", t.Ref)
	}
	if owner == OperatorOwner && (p.OperatorOrg == "" || org != p.OperatorOrg) {
		return t, fault.New(fault.Denied, "OPERATOR_OWNED",
			"/ref: %s belongs to the operator's biome store; only administrators of the operator's org move it", t.Ref)
	}
	t.From = cur.Lifecycle
	allowed := false
	for _, s := range nextStates[cur.Lifecycle] {
		allowed = allowed || s == t.To
	}
	if !allowed {
		return t, fault.New(fault.Conflict, "INVALID_TRANSITION",
			"/to: %s is %s and cannot move to %s (allowed: %v)", t.Ref, cur.Lifecycle, t.To, nextStates[cur.Lifecycle])
	}
	if t.To == store.LifecycleRetired && t.ReplacedBy == "" {
		return t, fault.New(fault.Invalid, "MISSING_SUCCESSOR", "/replacedBy: retiring %s needs the successor callers should move to", t.Ref)
	}
	if t.ReplacedBy != "" {
		if t.ReplacedBy == t.Ref {
			return t, fault.New(fault.Invalid, "INVALID_SUCCESSOR", "/replacedBy: a ref cannot replace itself")
		}
		if _, err := p.Store.GetCapability(ctx, t.ReplacedBy); errors.Is(err, store.ErrNotFound) {
			return t, fault.New(fault.Invalid, "UNKNOWN_SUCCESSOR", "/replacedBy: no capability %q", t.ReplacedBy)
		}
	}
	err = p.Store.TransitionLifecycle(ctx, store.LifecycleEvent{Ref: t.Ref, From: cur.Lifecycle, To: t.To,
		ReplacedBy: t.ReplacedBy, Actor: actor, At: time.Now().UTC()})
	if errors.Is(err, store.ErrConflict) {
		return t, fault.New(fault.Conflict, "CONCURRENT_TRANSITION", "%s changed state while this transition was made; read it again", t.Ref)
	}
	if err != nil {
		return t, fmt.Errorf("lifecycle %s: %w", t.Ref, err)
	}
	return t, p.Changed(ctx)
}
