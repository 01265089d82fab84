package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/store"
)

// BiomeView is a submitted biome version as an org admin reads it.
type BiomeView struct {
	BiomeID  string `json:"biomeId"`
	Version  string `json:"version"`
	Operator bool   `json:"operator"` // of the operator's own store
	// BuiltIn marks the gateway's own capabilities (BuiltinBiome): held by their
	// humanBaseline, never granted, with no permission digest to review.
	BuiltIn   bool            `json:"builtIn,omitempty"`
	Digest    json.RawMessage `json:"digest"`
	CreatedAt string          `json:"createdAt"`
}

// BuiltinBiome is the biome the gateway's Go-registered (kernel) capabilities belong to. Its
// version is a hash of their descriptors, so every build that changes one publishes another.
const BuiltinBiome = "xema"

func viewBiome(bv store.BiomeVersion, owner string) BiomeView {
	return BiomeView{BiomeID: bv.ID, Version: bv.Version, Operator: owner == OperatorOwner,
		BuiltIn: owner == OperatorOwner && bv.ID == BuiltinBiome, Digest: bv.Digest,
		CreatedAt: bv.CreatedAt.UTC().Format(time.RFC3339)}
}

// Biomes lists the versions of the biomes org may install (its own and the operator's),
// newest first; only id's when id is not empty.
func (p *Publisher) Biomes(ctx context.Context, org, id string) ([]BiomeView, error) {
	owners, err := p.Store.BiomeOwners(ctx)
	if err != nil {
		return nil, fmt.Errorf("list biomes: %w", err)
	}
	out := []BiomeView{}
	for bid, owner := range owners {
		if (id != "" && bid != id) || (owner != OperatorOwner && owner != org) {
			continue
		}
		versions, err := p.Store.ListBiomeVersions(ctx, bid)
		if err != nil {
			return nil, fmt.Errorf("list biomes: %w", err)
		}
		if bid == BuiltinBiome && owner == OperatorOwner && len(versions) > 0 {
			// Each build publishes its own version at start: only the newest, the one the
			// catalog serves, is the built-in biome; the others are history, not rows to review.
			versions = versions[len(versions)-1:]
		}
		for _, bv := range versions {
			out = append(out, viewBiome(bv, owner))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].CreatedAt != out[j].CreatedAt {
			return out[i].CreatedAt > out[j].CreatedAt
		}
		return out[i].BiomeID+"@"+out[i].Version > out[j].BiomeID+"@"+out[j].Version
	})
	return out, nil
}

// Biome returns one version org may install; another org's is answered as unknown.
func (p *Publisher) Biome(ctx context.Context, org, id, version string) (BiomeView, error) {
	notFound := fault.New(fault.NotFound, "UNKNOWN_BIOME", "no biome %s@%s", id, version)
	owner, mine, err := p.ownedBy(ctx, id, org)
	if err != nil {
		return BiomeView{}, fmt.Errorf("get biome: %w", err)
	}
	if !mine {
		return BiomeView{}, notFound
	}
	bv, err := p.Store.GetBiomeVersion(ctx, id, version)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return BiomeView{}, notFound
	case err != nil:
		return BiomeView{}, fmt.Errorf("get biome: %w", err)
	}
	return viewBiome(bv, owner), nil
}

// Grants lists org's grants, oldest approval first; only of biome id when id is not empty.
func (p *Publisher) Grants(ctx context.Context, org, id string) ([]store.Grant, error) {
	all, err := p.Store.ListGrants(ctx)
	if err != nil {
		return nil, fmt.Errorf("list grants: %w", err)
	}
	out := []store.Grant{}
	for _, g := range all {
		if g.Org == org && (id == "" || g.BiomeID == id) {
			out = append(out, g)
		}
	}
	return out, nil
}
