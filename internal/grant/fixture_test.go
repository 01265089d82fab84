package grant

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/manifest"
	"github.com/xemahq/xema/internal/store"
)

func boolp(b bool) *bool { return &b }

// descr is a contribution manifest with the fields the permission model reads.
func descr(ref, risk, effect, class string, approval bool) manifest.Manifest {
	return manifest.Manifest{
		Ref: ref, Title: ref, Summary: "s", SideEffects: "none",
		InputSchema: map[string]any{"type": "object"}, OutputSchema: map[string]any{"type": "object"},
		RiskTier: risk, EffectClass: effect, OutputClassification: class, RequiresApproval: approval,
		Reach: "integration", AuthorityEffect: "none",
	}
}

// demoBiome requires three of its own capabilities and one kernel capability.
func demoBiome(version string) *manifest.Biome {
	return &manifest.Biome{
		ID: "demo", Version: version, DefaultProfile: "read-only-assistant",
		RequiresCapabilities: []string{"kb:page.read@1", "kb:page.write@1", "kb:admin.purge@1", "biome:install@1"},
		PermissionHints: []manifest.PermissionHint{
			{Capability: "kb:page.read@1", Reason: "answer questions"},
			{Capability: "kb:page.write@1", Reason: "fix typos"},
		},
		Contributions: []manifest.Contribution{
			{Kind: "capability", Manifest: descr("kb:page.read@1", "low", "read", "internal", false)},
			{Kind: "capability", Manifest: descr("kb:page.write@1", "medium", "write", "internal", false)},
			{Kind: "capability", Manifest: descr("kb:admin.purge@1", "critical", "admin", "confidential", true)},
		},
	}
}

var kernelInstall = func() manifest.Manifest {
	m := descr("biome:install@1", "high", "admin", "internal", false)
	m.HumanBaseline = &manifest.HumanBaseline{Kind: "org-administrators", Environments: []string{"org"}}
	m.SafeForAgents = boolp(false)
	return m
}()

func kernelLookup(ref string) (manifest.Manifest, bool) {
	if ref == kernelInstall.Ref {
		return kernelInstall, true
	}
	return manifest.Manifest{}, false
}

func mustJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// storedVersion is the store record of a biome version with its digest.
func storedVersion(t testing.TB, b *manifest.Biome) store.BiomeVersion {
	t.Helper()
	d := ComputeDigest(b, nil, kernelLookup)
	return store.BiomeVersion{
		ID: b.ID, Version: b.Version, Manifest: mustJSON(t, b),
		DigestHash: d.Hash, Digest: mustJSON(t, d),
	}
}

// catalog is the store's catalog for demoBiome plus the kernel capability.
func catalog(t testing.TB, b *manifest.Biome) []store.Capability {
	t.Helper()
	var caps []store.Capability
	for _, c := range b.Contributions {
		caps = append(caps, store.Capability{
			Ref: c.Manifest.Ref, BiomeID: b.ID, BiomeVersion: b.Version,
			Manifest: mustJSON(t, c.Manifest), RunnerKind: "http", Lifecycle: store.LifecyclePublished,
		})
	}
	return append(caps, store.Capability{
		Ref: kernelInstall.Ref, BiomeID: "kernel", BiomeVersion: "1.0.0",
		Manifest: mustJSON(t, kernelInstall), RunnerKind: "kernel", Lifecycle: store.LifecyclePublished,
	})
}

var t0 = time.Date(2026, 1, 15, 10, 0, 0, 0, time.UTC)
