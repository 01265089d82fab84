package grant

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/manifest"
)

func TestDigestHashIgnoresOrder(t *testing.T) {
	want := ComputeDigest(demoBiome("1.0.0"), nil, kernelLookup)
	if !strings.HasPrefix(want.Hash, "sha256:") || len(want.Hash) != len("sha256:")+64 {
		t.Fatalf("hash %q is not sha256:<64 hex>", want.Hash)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		b := demoBiome("1.0.0")
		rng.Shuffle(len(b.RequiresCapabilities), func(i, j int) {
			b.RequiresCapabilities[i], b.RequiresCapabilities[j] = b.RequiresCapabilities[j], b.RequiresCapabilities[i]
		})
		rng.Shuffle(len(b.Contributions), func(i, j int) { b.Contributions[i], b.Contributions[j] = b.Contributions[j], b.Contributions[i] })
		rng.Shuffle(len(b.PermissionHints), func(i, j int) {
			b.PermissionHints[i], b.PermissionHints[j] = b.PermissionHints[j], b.PermissionHints[i]
		})
		got := ComputeDigest(b, nil, kernelLookup)
		if got.Hash != want.Hash || !reflect.DeepEqual(got, want) {
			t.Fatalf("shuffle %d: digest differs: %s vs %s", i, got.Hash, want.Hash)
		}
	}
}

func TestDigestHashTracksContent(t *testing.T) {
	base := ComputeDigest(demoBiome("1.0.0"), nil, kernelLookup).Hash
	for name, mutate := range map[string]func(*manifest.Biome){
		"risk tier":      func(b *manifest.Biome) { b.Contributions[0].Manifest.RiskTier = "medium" },
		"classification": func(b *manifest.Biome) { b.Contributions[0].Manifest.OutputClassification = "secret" },
		"reason":         func(b *manifest.Biome) { b.PermissionHints[0].Reason = "something else" },
		"version":        func(b *manifest.Biome) { b.Version = "1.0.1" },
		"biome id":       func(b *manifest.Biome) { b.ID = "other" },
		"one ref less":   func(b *manifest.Biome) { b.RequiresCapabilities = b.RequiresCapabilities[1:] },
	} {
		b := demoBiome("1.0.0")
		mutate(b)
		if h := ComputeDigest(b, nil, kernelLookup).Hash; h == base {
			t.Errorf("%s changed but the hash did not", name)
		}
	}
}

func TestDigestSummary(t *testing.T) {
	d := ComputeDigest(demoBiome("1.0.0"), nil, kernelLookup)
	if d.RiskTier != "critical" {
		t.Errorf("riskTier = %q, want critical (highest among the biome's)", d.RiskTier)
	}
	wantDomains := map[string][]DomainEntry{
		"biome": {{Ref: "biome:install@1", RiskTier: "high", Source: "catalog"}},
		"kb": {
			{Ref: "kb:admin.purge@1", RiskTier: "critical", RequiresApproval: true, Source: "biome"},
			{Ref: "kb:page.read@1", RiskTier: "low", Reason: "answer questions", Source: "biome"},
			{Ref: "kb:page.write@1", RiskTier: "medium", Reason: "fix typos", Source: "biome"},
		},
	}
	if !reflect.DeepEqual(d.Domains, wantDomains) {
		t.Errorf("domains = %+v\nwant %+v", d.Domains, wantDomains)
	}
	wantAccess := []DataAccess{
		{Ref: "biome:install@1", OutputClassification: "internal", EffectClass: "admin", Reach: "integration", AuthorityEffect: "none"},
		{Ref: "kb:admin.purge@1", OutputClassification: "confidential", EffectClass: "admin", Reach: "integration", AuthorityEffect: "none"},
		{Ref: "kb:page.read@1", OutputClassification: "internal", EffectClass: "read", Reach: "integration", AuthorityEffect: "none"},
		{Ref: "kb:page.write@1", OutputClassification: "internal", EffectClass: "write", Reach: "integration", AuthorityEffect: "none"},
	}
	if !reflect.DeepEqual(d.DataAccess, wantAccess) {
		t.Errorf("dataAccess = %+v\nwant %+v", d.DataAccess, wantAccess)
	}
}

func TestDigestUndeclaredCapability(t *testing.T) {
	b := &manifest.Biome{ID: "x", Version: "1.0.0", RequiresCapabilities: []string{"kb:page.read@1", "memory:recall@1"},
		Contributions: []manifest.Contribution{{Manifest: descr("kb:page.read@1", "low", "", "public", false)}}}
	d := ComputeDigest(b, nil, nil)
	if d.RiskTier != RiskUnknown {
		t.Errorf("riskTier = %q, want unknown: part of the risk is unseen", d.RiskTier)
	}
	if got := d.Domains["memory"]; len(got) != 1 || got[0].Source != "unknown" || got[0].RiskTier != RiskUnknown {
		t.Errorf("memory domain = %+v", got)
	}
	if d.DataAccess[0].EffectClass != EffectWrite {
		t.Errorf("undeclared effectClass = %q, want write", d.DataAccess[0].EffectClass)
	}
	if d.DataAccess[1].EffectClass != EffectUnknown {
		t.Errorf("unknown capability effectClass = %q, want unknown", d.DataAccess[1].EffectClass)
	}
}

func TestDigestDiff(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*manifest.Biome)
		want   Diff
	}{
		{"unchanged", func(*manifest.Biome) {}, Diff{PreviousVersion: "1.0.0", Added: []string{}, Removed: []string{}, Changed: []Change{}}},
		{"added and removed", func(b *manifest.Biome) {
			b.RequiresCapabilities = []string{"kb:page.read@1", "kb:page.write@1", "biome:install@1", "kb:page.delete@1"}
			b.Contributions = append(b.Contributions, manifest.Contribution{Manifest: descr("kb:page.delete@1", "high", "write", "internal", true)})
		}, Diff{PreviousVersion: "1.0.0", Added: []string{"kb:page.delete@1"}, Removed: []string{"kb:admin.purge@1"}, Changed: []Change{}}},
		{"risk, effect and approval changed", func(b *manifest.Biome) {
			m := &b.Contributions[0].Manifest
			m.RiskTier, m.EffectClass, m.RequiresApproval = "high", "write", true
		}, Diff{PreviousVersion: "1.0.0", Added: []string{}, Removed: []string{}, Changed: []Change{{Ref: "kb:page.read@1", Fields: map[string]FieldChange{
			"riskTier":         {From: "low", To: "high"},
			"effectClass":      {From: "read", To: "write"},
			"requiresApproval": {From: false, To: true},
		}}}}},
		{"classification alone is not a diff field", func(b *manifest.Biome) {
			b.Contributions[0].Manifest.OutputClassification = "public"
		}, Diff{PreviousVersion: "1.0.0", Added: []string{}, Removed: []string{}, Changed: []Change{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := demoBiome("2.0.0")
			tt.mutate(next)
			got := ComputeDigest(next, demoBiome("1.0.0"), kernelLookup).Diff
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("diff = %+v\nwant %+v", got, tt.want)
			}
		})
	}
	first := ComputeDigest(demoBiome("1.0.0"), nil, kernelLookup).Diff
	if first.PreviousVersion != "" || len(first.Added) != 4 {
		t.Errorf("first install diff = %+v, want all four refs added", first)
	}
}

func TestCatalogLookup(t *testing.T) {
	lookup, err := CatalogLookup(catalog(t, demoBiome("1.0.0")))
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := lookup("biome:install@1"); !ok || m.RiskTier != "high" {
		t.Errorf("lookup biome:install@1 = %+v, %v", m, ok)
	}
	if _, ok := lookup("nope:x@1"); ok {
		t.Error("lookup of an absent ref succeeded")
	}
	caps := catalog(t, demoBiome("1.0.0"))
	caps[0].Manifest = []byte("{")
	if _, err := CatalogLookup(caps); err == nil || !strings.Contains(err.Error(), caps[0].Ref) {
		t.Errorf("bad manifest: err = %v, want one naming %s", err, caps[0].Ref)
	}
}
