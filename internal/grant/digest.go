package grant

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/xemahq/xema/internal/capref"
	"github.com/xemahq/xema/internal/manifest"
	"github.com/xemahq/xema/internal/store"
)

// Digest is the PermissionDigest an org admin approves: what a biome version may ask for,
// how risky it is, what data it touches, and what changed since the previous version.
type Digest struct {
	Hash       string                   `json:"hash"`
	BiomeID    string                   `json:"biomeId"`
	Version    string                   `json:"version"`
	RiskTier   string                   `json:"riskTier"`
	Domains    map[string][]DomainEntry `json:"domains"`
	DataAccess []DataAccess             `json:"dataAccess"`
	Diff       Diff                     `json:"diff"`
}

// DomainEntry is one required capability under its domain.
type DomainEntry struct {
	Ref              string `json:"ref"`
	RiskTier         string `json:"riskTier"`
	RequiresApproval bool   `json:"requiresApproval"`
	Reason           string `json:"reason"` // the biome's permission hint
	// Source says where the descriptor came from: "biome" (a contribution of this biome),
	// "catalog" (the gateway's catalog, e.g. a kernel capability) or "unknown".
	Source string `json:"source"`
}

// DataAccess summarises what one capability does with data.
type DataAccess struct {
	Ref                  string `json:"ref"`
	OutputClassification string `json:"outputClassification"`
	EffectClass          string `json:"effectClass"`
	Reach                string `json:"reach"`
	AuthorityEffect      string `json:"authorityEffect"`
}

// Diff compares the required capabilities with the previously installed version's.
type Diff struct {
	PreviousVersion string   `json:"previousVersion"` // "" on first install
	Added           []string `json:"added"`
	Removed         []string `json:"removed"`
	Changed         []Change `json:"changed"`
}

// Change lists the permission-relevant fields of one capability that changed.
type Change struct {
	Ref    string                 `json:"ref"`
	Fields map[string]FieldChange `json:"fields"` // riskTier, effectClass, requiresApproval
}

// FieldChange is one field's value before and after.
type FieldChange struct {
	From any `json:"from"`
	To   any `json:"to"`
}

// Lookup finds the descriptor of a required capability the biome does not contribute
// itself (a kernel capability, another biome's). The gateway passes its catalog.
type Lookup func(ref string) (manifest.Manifest, bool)

// CatalogLookup is a Lookup over catalog entries.
func CatalogLookup(caps []store.Capability) (Lookup, error) {
	byRef := make(map[string]manifest.Manifest, len(caps))
	for _, c := range caps {
		var m manifest.Manifest
		if err := json.Unmarshal(c.Manifest, &m); err != nil {
			return nil, fmt.Errorf("catalog entry %s: %w", c.Ref, err)
		}
		byRef[c.Ref] = m
	}
	return func(ref string) (manifest.Manifest, bool) {
		m, ok := byRef[ref]
		return m, ok
	}, nil
}

// summary is what the digest knows of one required capability.
type summary struct {
	entry  DomainEntry
	access DataAccess
}

// ComputeDigest computes the digest of b, diffed against prev (nil on first install).
// Descriptors come from b's own contributions first, then lookup (may be nil); a required
// capability found in neither has risk tier and effect class "unknown".
func ComputeDigest(b *manifest.Biome, prev *manifest.Biome, lookup Lookup) Digest {
	cur := summarize(b, lookup)
	d := Digest{
		BiomeID:    b.ID,
		Version:    b.Version,
		RiskTier:   RiskLow,
		Domains:    map[string][]DomainEntry{},
		DataAccess: []DataAccess{},
		Diff:       Diff{Added: []string{}, Removed: []string{}, Changed: []Change{}},
	}
	for _, ref := range slices.Sorted(maps.Keys(cur)) {
		s := cur[ref]
		dom := domainOf(ref)
		d.Domains[dom] = append(d.Domains[dom], s.entry)
		d.DataAccess = append(d.DataAccess, s.access)
		if riskRank(s.entry.RiskTier) > riskRank(d.RiskTier) {
			d.RiskTier = s.entry.RiskTier
		}
	}

	var old map[string]summary
	if prev != nil {
		d.Diff.PreviousVersion = prev.Version
		old = summarize(prev, lookup)
	}
	for _, ref := range slices.Sorted(maps.Keys(cur)) {
		o, existed := old[ref]
		if !existed {
			d.Diff.Added = append(d.Diff.Added, ref)
			continue
		}
		if ch := compare(o, cur[ref]); len(ch) > 0 {
			d.Diff.Changed = append(d.Diff.Changed, Change{Ref: ref, Fields: ch})
		}
	}
	for _, ref := range slices.Sorted(maps.Keys(old)) {
		if _, still := cur[ref]; !still {
			d.Diff.Removed = append(d.Diff.Removed, ref)
		}
	}
	d.Hash = hashDigest(d)
	return d
}

func summarize(b *manifest.Biome, lookup Lookup) map[string]summary {
	declared := make(map[string]manifest.Manifest, len(b.Contributions))
	for _, c := range b.Contributions {
		declared[c.Manifest.Ref] = c.Manifest
	}
	reasons := make(map[string]string, len(b.PermissionHints))
	for _, h := range b.PermissionHints {
		reasons[h.Capability] = h.Reason
	}
	out := make(map[string]summary, len(b.RequiresCapabilities))
	for _, ref := range b.RequiresCapabilities {
		m, ok := declared[ref]
		source := "biome"
		if !ok && lookup != nil {
			m, ok = lookup(ref)
			source = "catalog"
		}
		s := summary{
			entry:  DomainEntry{Ref: ref, Reason: reasons[ref], Source: "unknown", RiskTier: RiskUnknown},
			access: DataAccess{Ref: ref, EffectClass: EffectUnknown},
		}
		if ok {
			s.entry.Source = source
			s.entry.RiskTier = m.RiskTier
			s.entry.RequiresApproval = m.RequiresApproval
			s.access = DataAccess{
				Ref:                  ref,
				OutputClassification: m.OutputClassification,
				EffectClass:          effectiveEffectClass(m.EffectClass),
				Reach:                m.Reach,
				AuthorityEffect:      m.AuthorityEffect,
			}
		}
		out[ref] = s
	}
	return out
}

func compare(from, to summary) map[string]FieldChange {
	ch := map[string]FieldChange{}
	if from.entry.RiskTier != to.entry.RiskTier {
		ch["riskTier"] = FieldChange{From: from.entry.RiskTier, To: to.entry.RiskTier}
	}
	if from.access.EffectClass != to.access.EffectClass {
		ch["effectClass"] = FieldChange{From: from.access.EffectClass, To: to.access.EffectClass}
	}
	if from.entry.RequiresApproval != to.entry.RequiresApproval {
		ch["requiresApproval"] = FieldChange{From: from.entry.RequiresApproval, To: to.entry.RequiresApproval}
	}
	return ch
}

// domainOf is the ref's domain per internal/capref; a ref that does not parse (the linter
// rejects those before a digest is computed) is grouped by the text before its colon.
func domainOf(ref string) string {
	if r, err := capref.Parse(ref); err == nil {
		return r.Domain
	}
	dom, _, _ := strings.Cut(ref, ":")
	return dom
}

// hashDigest is sha256 over the canonical JSON of d without its hash: object keys sorted,
// lists already sorted by ref, so equal content hashes equal whatever the file order.
func hashDigest(d Digest) string {
	d.Hash = ""
	canon, err := canonicalJSON(d)
	if err != nil {
		// Digest holds only strings, bools, slices and maps of them: encoding cannot fail.
		panic(fmt.Sprintf("grant: encode digest: %v", err))
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// canonicalJSON encodes v with every object's keys sorted (encoding/json sorts map keys;
// the round trip turns structs into maps).
func canonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, err
	}
	return json.Marshal(generic)
}
