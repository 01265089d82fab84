package catalog

import (
	"context"
	"fmt"
	"slices"

	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/store"
)

// CompileInput is what the policy data is compiled from at snap (grant.Input without
// environments, profiles and revision), with extra grants counted as if recorded: a dry run
// of a grant compiles the data it would make without storing it.
func (c *Catalog) CompileInput(ctx context.Context, snap *Snapshot, extra ...store.Grant) (grant.Input, error) {
	// An extra grant stands in for the stored grant of its id (a revoke's dry run).
	in := grant.Input{Grants: slices.DeleteFunc(slices.Clone(snap.grants), func(g store.Grant) bool {
		return slices.ContainsFunc(extra, func(x store.Grant) bool { return x.ID == g.ID })
	})}
	in.Grants = append(in.Grants, extra...)
	for _, e := range snap.sorted {
		in.Capabilities = append(in.Capabilities, e.Capability)
	}
	seen := map[string]bool{}
	for _, e := range snap.Pinned() {
		in.Pinned = append(in.Pinned, e.Capability)
		seen[e.Ref()+"@"+e.Capability.BiomeVersion] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range extra {
		pv, err := c.version(ctx, g.BiomeID, g.BiomeVersion)
		if err != nil {
			return grant.Input{}, err
		}
		for _, capa := range pinnedAt(snap.byRef, pv.caps) {
			if !seen[capa.Ref+"@"+capa.BiomeVersion] {
				in.Pinned = append(in.Pinned, capa)
				seen[capa.Ref+"@"+capa.BiomeVersion] = true
			}
		}
	}
	// Only effective grants are compiled: the biome versions they name, each read once.
	for _, g := range grant.Effective(in.Grants) {
		key := g.BiomeID + "@" + g.BiomeVersion
		if seen["biome:"+key] {
			continue
		}
		seen["biome:"+key] = true
		pv, err := c.version(ctx, g.BiomeID, g.BiomeVersion)
		if err != nil {
			return grant.Input{}, fmt.Errorf("grant %s: %w", g.ID, err)
		}
		in.Biomes = append(in.Biomes, pv.bv)
	}
	return in, nil
}
