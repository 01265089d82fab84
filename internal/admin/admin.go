// Package admin registers the gateway's own operations as kernel capabilities (DESIGN.md,
// "One surface for everything"): submitting a biome and approving a grant run through the
// same funnel as any capability, authorized by their humanBaseline and audited the same way.
package admin

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"time"

	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/store"
)

// Refs of the admin capabilities.
const (
	RefSubmit    = "biome:submit-to-store@1"
	RefInstall   = "biome:install@1"
	RefLifecycle = "capability:lifecycle.transition@1"
	RefBiomeList = "store:biome.list@1"
	RefBiomeGet  = "store:biome.get@1"
	RefGrantList = "biome:grant.list@1"
	// RefGrantRevoke and RefGrantChange are a grant's lifecycle after its approval.
	RefGrantRevoke = "biome:grant.revoke@1"
	RefGrantChange = "biome:grant.change@1"
)

// lookup is the input of the listing and reading capabilities.
type lookup struct {
	BiomeID string `json:"biomeId"`
	Version string `json:"version"`
}

func decodeLookup(call kernel.Call) (lookup, error) {
	var in lookup
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return in, fmt.Errorf("decode validated input: %w", err)
	}
	return in, nil
}

//go:embed contributions/*.json
var descriptors embed.FS

// Contributions are the kernel capabilities' descriptors (contributions/*.json): the OpenAPI
// document takes their inputSchema and outputSchema as the routes' bodies.
var Contributions fs.FS = descriptors

// GrantView is a recorded BiomeInstallGrant with where it stands: active (its (org, biome)'s
// effective grant), superseded (a newer grant, a change, replaced it) or revoked, and who
// moved it there when.
type GrantView struct {
	GrantID      string          `json:"grantId"`
	BiomeID      string          `json:"biomeId"`
	Version      string          `json:"version"`
	DigestHash   string          `json:"digestHash"`
	Profile      string          `json:"profile"`
	Customize    json.RawMessage `json:"customize,omitempty"`
	ApprovedBy   string          `json:"approvedBy"`
	ApprovedAt   string          `json:"approvedAt"`
	Status       string          `json:"status"`
	Supersedes   string          `json:"supersedes,omitempty"`
	SupersededBy string          `json:"supersededBy,omitempty"`
	RevokedBy    string          `json:"revokedBy,omitempty"`
	RevokedAt    string          `json:"revokedAt,omitempty"`
}

// ViewGrant is the public shape of a stored grant just recorded (active).
func ViewGrant(g store.Grant) GrantView {
	return ViewState(catalog.GrantState{Grant: g, Status: catalog.GrantActive})
}

// ViewState is the public shape of a grant with its status.
func ViewState(st catalog.GrantState) GrantView {
	g := st.Grant
	v := GrantView{GrantID: g.ID, BiomeID: g.BiomeID, Version: g.BiomeVersion, DigestHash: g.DigestHash,
		Profile: g.Profile, Customize: g.Customize, ApprovedBy: g.ApprovedBy, ApprovedAt: g.ApprovedAt.Format(time.RFC3339),
		Status: st.Status, Supersedes: g.Supersedes, SupersededBy: st.SupersededBy, RevokedBy: g.RevokedBy}
	if g.Revoked() {
		v.RevokedAt = g.RevokedAt.Format(time.RFC3339)
	}
	return v
}

// ChangeView answers biome:grant.change@1: the new grant, the one it supersedes, their
// differences and, with dryRun, the impact (nothing recorded).
type ChangeView struct {
	Grant    GrantView             `json:"grant"`
	Replaces GrantView             `json:"replaces"`
	Diff     []catalog.FieldChange `json:"diff"`
	DryRun   bool                  `json:"dryRun"`
	Impact   *catalog.Impact       `json:"impact,omitempty"`
}

// DryRunView answers a grant's dry run: the grant it would record and its impact.
type DryRunView struct {
	GrantView
	DryRun bool           `json:"dryRun"`
	Impact catalog.Impact `json:"impact"`
}

// DefaultDryRunWindow is how far back a grant's dry run replays without `since`; at most
// MaxDryRunWindow.
const (
	DefaultDryRunWindow = 7 * 24 * time.Hour
	MaxDryRunWindow     = 30 * 24 * time.Hour
)

// RevokeDryRunView answers a revoke's dry run: the grant, still active, and what revoking it
// would deny of the org's recorded calls.
type RevokeDryRunView struct {
	GrantView
	DryRun bool           `json:"dryRun"`
	Impact catalog.Impact `json:"impact"`
}

// splitDryRun takes dryRun and since out of a biome:install@1, biome:grant.change@1 or
// biome:grant.revoke@1 input
// (the rest is decoded strictly); window is nil unless dryRun is true.
func splitDryRun(input json.RawMessage) (req json.RawMessage, window *time.Duration, err error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(input, &obj); err != nil {
		return nil, nil, fmt.Errorf("decode validated input: %w", err)
	}
	var dry bool
	var since string
	if raw, ok := obj["dryRun"]; ok {
		if err := json.Unmarshal(raw, &dry); err != nil {
			return nil, nil, fmt.Errorf("decode validated input: %w", err)
		}
	}
	if raw, ok := obj["since"]; ok {
		if err := json.Unmarshal(raw, &since); err != nil {
			return nil, nil, fmt.Errorf("decode validated input: %w", err)
		}
	}
	delete(obj, "dryRun")
	delete(obj, "since")
	if req, err = json.Marshal(obj); err != nil {
		return nil, nil, fmt.Errorf("encode grant request: %w", err)
	}
	if !dry {
		if since != "" {
			return nil, nil, fault.New(fault.Invalid, fault.CodeInvalidArgument, "/since: only with dryRun")
		}
		return req, nil, nil
	}
	w := DefaultDryRunWindow
	if since != "" {
		if w, err = time.ParseDuration(since); err != nil || w <= 0 || w > MaxDryRunWindow {
			return nil, nil, fault.New(fault.Invalid, fault.CodeInvalidArgument, "/since: %q is not a positive duration up to %v, such as 168h", since, MaxDryRunWindow)
		}
	}
	return req, &w, nil
}

// change serves biome:grant.change@1.
func change(ctx context.Context, pub *catalog.Publisher, call kernel.Call) (any, error) {
	raw, window, err := splitDryRun(call.Input)
	if err != nil {
		return nil, err
	}
	var ch catalog.GrantChange
	if err := json.Unmarshal(raw, &ch); err != nil {
		return nil, fmt.Errorf("decode validated input: %w", err)
	}
	var since *time.Time
	if window != nil {
		t := time.Now().Add(-*window)
		since = &t
	}
	res, err := pub.Change(ctx, call.Exec.Org, call.Exec.Subject.Ref, ch, since)
	if err != nil {
		return nil, err
	}
	view := ChangeView{Grant: ViewState(catalog.GrantState{Grant: res.Grant, Status: catalog.GrantActive}),
		Replaces: ViewState(res.Replaces), Diff: res.Diff, DryRun: window != nil, Impact: res.Impact}
	if view.DryRun {
		view.Grant.Status = "proposed"
	}
	return view, nil
}

// Register queues the admin capabilities on reg with their handlers over pub.
func Register(reg *kernel.Registry, pub *catalog.Publisher) error {
	handlers := map[string]kernel.Handler{
		"contributions/biome-submit-to-store.json": func(ctx context.Context, call kernel.Call) (any, error) {
			var sub catalog.Submission
			if err := json.Unmarshal(call.Input, &sub); err != nil {
				return nil, fmt.Errorf("decode validated input: %w", err)
			}
			return pub.Submit(ctx, sub, call.Exec.Org)
		},
		"contributions/biome-install.json": func(ctx context.Context, call kernel.Call) (any, error) {
			req, dry, err := splitDryRun(call.Input)
			if err != nil {
				return nil, err
			}
			if dry == nil {
				g, err := pub.Install(ctx, req, call.Exec.Org, call.Exec.Subject.Ref)
				if err != nil {
					return nil, err
				}
				return ViewGrant(g), nil
			}
			g, imp, err := pub.DryRun(ctx, req, call.Exec.Org, call.Exec.Subject.Ref, time.Now().Add(-*dry))
			if err != nil {
				return nil, err
			}
			return DryRunView{GrantView: ViewGrant(g), DryRun: true, Impact: imp}, nil
		},
		"contributions/biome-list.json": func(ctx context.Context, call kernel.Call) (any, error) {
			in, err := decodeLookup(call)
			if err != nil {
				return nil, err
			}
			bs, err := pub.Biomes(ctx, call.Exec.Org, in.BiomeID)
			if err != nil {
				return nil, err
			}
			return map[string]any{"biomes": bs}, nil
		},
		"contributions/biome-get.json": func(ctx context.Context, call kernel.Call) (any, error) {
			in, err := decodeLookup(call)
			if err != nil {
				return nil, err
			}
			return pub.Biome(ctx, call.Exec.Org, in.BiomeID, in.Version)
		},
		"contributions/grant-list.json": func(ctx context.Context, call kernel.Call) (any, error) {
			in, err := decodeLookup(call)
			if err != nil {
				return nil, err
			}
			gs, err := pub.Grants(ctx, call.Exec.Org, in.BiomeID)
			if err != nil {
				return nil, err
			}
			states := catalog.States(gs)
			views := make([]GrantView, len(states))
			for i, st := range states {
				views[i] = ViewState(st)
			}
			return map[string]any{"grants": views}, nil
		},
		"contributions/grant-revoke.json": func(ctx context.Context, call kernel.Call) (any, error) {
			raw, window, err := splitDryRun(call.Input)
			if err != nil {
				return nil, err
			}
			var in struct {
				GrantID string `json:"grantId"`
			}
			if err := json.Unmarshal(raw, &in); err != nil {
				return nil, fmt.Errorf("decode validated input: %w", err)
			}
			if window != nil {
				st, imp, err := pub.RevokeDryRun(ctx, call.Exec.Org, in.GrantID, call.Exec.Subject.Ref, time.Now().Add(-*window))
				if err != nil {
					return nil, err
				}
				return RevokeDryRunView{GrantView: ViewState(st), DryRun: true, Impact: imp}, nil
			}
			st, err := pub.Revoke(ctx, call.Exec.Org, in.GrantID, call.Exec.Subject.Ref)
			if err != nil {
				return nil, err
			}
			return ViewState(st), nil
		},
		"contributions/grant-change.json": func(ctx context.Context, call kernel.Call) (any, error) {
			return change(ctx, pub, call)
		},
		"contributions/capability-lifecycle.json": func(ctx context.Context, call kernel.Call) (any, error) {
			var t catalog.Transition
			if err := json.Unmarshal(call.Input, &t); err != nil {
				return nil, fmt.Errorf("decode validated input: %w", err)
			}
			return pub.Transition(ctx, t, call.Exec.Org, call.Exec.Subject.Ref)
		},
	}
	return reg.RegisterFiles(descriptors, handlers)
}
