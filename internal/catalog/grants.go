package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/store"
)

// Grant statuses as listed: the effective grant of its (org, biome) is active, an older one
// superseded (a newer grant changed it), a revoked one revoked.
const (
	GrantActive     = "active"
	GrantSuperseded = "superseded"
	GrantRevoked    = "revoked"
)

// Codes of the grant lifecycle's refusals.
const (
	CodeGrantNotFound  = "GRANT_NOT_FOUND"
	CodeGrantNotActive = "GRANT_NOT_ACTIVE"
	CodeGrantUnchanged = "GRANT_UNCHANGED"
	// CodeDryRunBusy (503): another grant dry run is running; nothing was replayed.
	CodeDryRunBusy = "DRY_RUN_BUSY"
	// CodeDryRunUnavailable (501): the gateway has no Impact to replay calls with.
	CodeDryRunUnavailable = "DRY_RUN_UNAVAILABLE"
)

// errDryRunUnavailable answers a dry run asked of a Publisher without Impact.
func errDryRunUnavailable() error {
	return fault.New(fault.NotImplemented, CodeDryRunUnavailable, "this gateway cannot replay calls")
}

// GrantState is a grant with where it stands in its (org, biome).
type GrantState struct {
	store.Grant
	Status string
	// SupersededBy is the grant that changed this one, when one did.
	SupersededBy string
}

// States answers the status of each of grants, in order. grants must hold every grant of
// the scopes they belong to (an org's whole listing does).
func States(grants []store.Grant) []GrantState {
	newest := grant.Newest(grants)
	by := map[string]string{}
	for _, g := range grants {
		if g.Supersedes != "" {
			by[g.Supersedes] = g.ID
		}
	}
	out := make([]GrantState, len(grants))
	for i, g := range grants {
		st := GrantState{Grant: g, Status: GrantActive, SupersededBy: by[g.ID]}
		switch {
		case g.Revoked():
			st.Status = GrantRevoked
		case newest[grant.Scope{Org: g.Org, Biome: g.BiomeID}].ID != g.ID:
			st.Status = GrantSuperseded
			if st.SupersededBy == "" {
				st.SupersededBy = newest[grant.Scope{Org: g.Org, Biome: g.BiomeID}].ID
			}
		}
		out[i] = st
	}
	return out
}

// state finds grant id among org's grants; another org's grant is answered as unknown.
func (p *Publisher) state(ctx context.Context, org, id string) (GrantState, error) {
	gs, err := p.Grants(ctx, org, "")
	if err != nil {
		return GrantState{}, err
	}
	for _, st := range States(gs) {
		if st.ID == id {
			return st, nil
		}
	}
	return GrantState{}, fault.New(fault.NotFound, CodeGrantNotFound, "no grant %q", id)
}

// notActive refuses a lifecycle move on a grant that is no longer effective.
func notActive(st GrantState, verb string) error {
	if st.Status == GrantRevoked {
		return fault.New(fault.Conflict, CodeGrantNotActive, "grant %s was revoked by %s at %s; there is nothing to %s",
			st.ID, st.RevokedBy, st.RevokedAt.Format(time.RFC3339), verb)
	}
	return fault.New(fault.Conflict, CodeGrantNotActive, "grant %s is superseded by grant %s; %s that one", st.ID, st.SupersededBy, verb)
}

// Revoke revokes org's active grant id: its (org, biome) has no effective grant from now on,
// on every replica as soon as it rebuilds its policy (the store announces the revision).
func (p *Publisher) Revoke(ctx context.Context, org, id, by string) (GrantState, error) {
	st, err := p.state(ctx, org, id)
	if err != nil {
		return GrantState{}, err
	}
	if st.Status != GrantActive {
		return GrantState{}, notActive(st, "revoke")
	}
	g, err := p.Store.RevokeGrant(ctx, org, id, by, time.Now())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return GrantState{}, fault.New(fault.NotFound, CodeGrantNotFound, "no grant %q", id)
	case errors.Is(err, store.ErrConflict):
		return GrantState{}, fault.New(fault.Conflict, CodeGrantNotActive, "grant %s was revoked meanwhile", id)
	case err != nil:
		return GrantState{}, fmt.Errorf("revoke grant %s: %w", id, err)
	}
	if err := p.Changed(ctx); err != nil {
		return GrantState{}, err
	}
	// The policy serving now holds no new call under the grant: end those it left held.
	if p.Revoked != nil {
		if err := p.Revoked(ctx, g); err != nil {
			return GrantState{}, fmt.Errorf("grant %s is revoked, but the calls held under it could not all be withdrawn "+
				"(none can be approved while no grant of %s is in effect, and granting it again withdraws them first): %w",
				id, g.BiomeID, err)
		}
	}
	return GrantState{Grant: g, Status: GrantRevoked}, nil
}

// RevokeDryRun answers org's active grant id and the impact of revoking it over org's calls
// recorded since since; it changes nothing.
func (p *Publisher) RevokeDryRun(ctx context.Context, org, id, by string, since time.Time) (GrantState, Impact, error) {
	if p.Impact == nil {
		return GrantState{}, Impact{}, errDryRunUnavailable()
	}
	st, err := p.state(ctx, org, id)
	if err != nil {
		return GrantState{}, Impact{}, err
	}
	if st.Status != GrantActive {
		return GrantState{}, Impact{}, notActive(st, "revoke")
	}
	revoked := st.Grant
	revoked.RevokedBy, revoked.RevokedAt = by, time.Now().UTC()
	imp, err := p.Impact(ctx, revoked, since)
	return st, imp, err
}

// GrantChange is a change of an active grant: the fields given replace the grant's own.
type GrantChange struct {
	GrantID   string          `json:"grantId"`
	Profile   string          `json:"profile"`
	Customize json.RawMessage `json:"customize"`
}

// FieldChange is one difference between a grant and its change, by JSON pointer into the
// grant request; From or To is absent where the field is.
type FieldChange struct {
	Path string          `json:"path"`
	From json.RawMessage `json:"from,omitempty"`
	To   json.RawMessage `json:"to,omitempty"`
}

// ChangeResult answers a change: the grant it records (or would), the one it supersedes, what
// differs between them, and with a dry run the impact on recorded calls.
type ChangeResult struct {
	Grant    store.Grant
	Replaces GrantState
	Diff     []FieldChange
	Impact   *Impact
}

// Change records a new grant of the same biome version as org's active grant ch.GrantID, with
// ch's profile and customization where given, superseding it. With dryRunSince it records
// nothing and answers the diff and the impact on org's calls recorded since then.
func (p *Publisher) Change(ctx context.Context, org, by string, ch GrantChange, dryRunSince *time.Time) (ChangeResult, error) {
	if dryRunSince != nil && p.Impact == nil {
		return ChangeResult{}, errDryRunUnavailable()
	}
	old, err := p.state(ctx, org, ch.GrantID)
	if err != nil {
		return ChangeResult{}, err
	}
	if old.Status != GrantActive {
		return ChangeResult{}, notActive(old, "change")
	}
	req := map[string]any{"biomeId": old.BiomeID, "version": old.BiomeVersion, "digestHash": old.DigestHash, "profile": old.Profile}
	if ch.Profile != "" {
		req["profile"] = ch.Profile
	}
	switch {
	case ch.Customize != nil:
		req["customize"] = ch.Customize
	case old.Customize != nil:
		req["customize"] = old.Customize
	}
	raw, err := json.Marshal(req)
	if err != nil {
		return ChangeResult{}, fmt.Errorf("encode grant change: %w", err)
	}
	g, _, err := p.validateGrant(ctx, raw, org, by)
	if err != nil {
		return ChangeResult{}, err
	}
	g.Supersedes = old.ID
	res := ChangeResult{Grant: g, Replaces: old, Diff: diffGrants(old.Grant, g)}
	if len(res.Diff) == 0 {
		return ChangeResult{}, fault.New(fault.Invalid, CodeGrantUnchanged,
			"the change leaves grant %s as it is: give another profile or customize", old.ID)
	}
	if dryRunSince != nil {
		imp, err := p.Impact(ctx, g, *dryRunSince)
		if err != nil {
			return ChangeResult{}, err
		}
		res.Impact = &imp
		return res, nil
	}
	if err := p.Store.PutGrant(ctx, g); err != nil {
		return ChangeResult{}, fmt.Errorf("change grant %s: %w", old.ID, err)
	}
	res.Replaces.Status, res.Replaces.SupersededBy = GrantSuperseded, g.ID
	return res, p.Changed(ctx)
}

// diffGrants lists what differs between two grants of one biome version: the profile and
// each customized field of each ref.
func diffGrants(a, b store.Grant) []FieldChange {
	var out []FieldChange
	if a.Profile != b.Profile {
		out = append(out, FieldChange{Path: "/profile", From: jsonString(a.Profile), To: jsonString(b.Profile)})
	}
	return diffJSON("/customize", decoded(a.Customize), decoded(b.Customize), out)
}

func jsonString(s string) json.RawMessage {
	raw, _ := json.Marshal(s) // a string always encodes
	return raw
}

func decoded(raw json.RawMessage) any {
	var v any
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &v) // a stored grant's customize is valid JSON
	}
	return v
}

// diffJSON appends the differences of two decoded JSON values at path: objects field by
// field (JSON pointer escaping, RFC 6901), anything else as a whole.
func diffJSON(path string, a, b any, out []FieldChange) []FieldChange {
	am, aObj := a.(map[string]any)
	bm, bObj := b.(map[string]any)
	if aObj && bObj || a == nil && bObj || aObj && b == nil {
		keys := slices.Sorted(maps.Keys(am))
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			out = diffJSON(path+"/"+escapePointer(k), am[k], bm[k], out)
		}
		return out
	}
	ar, br := encoded(a), encoded(b)
	if bytes.Equal(ar, br) {
		return out
	}
	return append(out, FieldChange{Path: path, From: ar, To: br})
}

func encoded(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	raw, _ := json.Marshal(v) // decoded JSON always encodes, maps with sorted keys
	return raw
}

func escapePointer(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		switch r {
		case '~':
			b.WriteString("~0")
		case '/':
			b.WriteString("~1")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
