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
	in := grant.Input{Grants: append(slices.Clone(snap.grants), extra...)}
	for _, e := range snap.sorted {
		in.Capabilities = append(in.Capabilities, e.Capability)
	}
	seen := map[string]bool{}
	for _, e := range snap.Pinned() {
		in.Pinned = append(in.Pinned, e.Capability)
		seen[e.Ref()+"@"+e.Capability.BiomeVersion] = true
	}
	if len(extra) > 0 {
		c.mu.Lock()
		defer c.mu.Unlock()
	}
	for _, g := range extra {
		caps, err := c.versionCaps(ctx, g.BiomeID, g.BiomeVersion)
		if err != nil {
			return grant.Input{}, err
		}
		for _, capa := range caps {
			cur, ok := snap.byRef[capa.Ref]
			if !ok || cur.Capability.BiomeID != capa.BiomeID || cur.Capability.BiomeVersion == capa.BiomeVersion ||
				seen[capa.Ref+"@"+capa.BiomeVersion] {
				continue
			}
			capa.Lifecycle, capa.ReplacedBy = cur.Capability.Lifecycle, cur.Capability.ReplacedBy
			in.Pinned = append(in.Pinned, capa)
			seen[capa.Ref+"@"+capa.BiomeVersion] = true
		}
	}
	done := map[string]bool{}
	for _, g := range in.Grants {
		key := g.BiomeID + "@" + g.BiomeVersion
		if done[key] {
			continue
		}
		done[key] = true
		bv, err := c.store.GetBiomeVersion(ctx, g.BiomeID, g.BiomeVersion)
		if err != nil {
			return grant.Input{}, fmt.Errorf("grant %s: %w", g.ID, err)
		}
		in.Biomes = append(in.Biomes, bv)
	}
	return in, nil
}
