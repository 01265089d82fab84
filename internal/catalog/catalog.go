// Package catalog is the gateway's view of the capability catalog: the store's capabilities
// with their parsed manifests and compiled input schemas, swapped atomically whenever the
// store's revision moves. The store stays the system of record; this is its read index.
package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/inputschema"
	"github.com/xemahq/xema/internal/manifest"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/telemetry"
)

// Entry is one capability ready for the funnel.
type Entry struct {
	Capability store.Capability
	Manifest   manifest.Manifest
	Invocation *manifest.Invocation
	Input      *inputschema.Schema
	// Output checks what a provider answers; nil when the manifest declares no output schema.
	Output *inputschema.Schema

	resourceProp string
}

// Ref is the entry's capability ref.
func (e *Entry) Ref() string { return e.Capability.Ref }

// Snapshot is an immutable catalog at one store revision.
type Snapshot struct {
	Revision int64
	byRef    map[string]*Entry
	sorted   []*Entry
	// owners maps a biome id to the org owning it ("" for the operator's store).
	owners map[string]string
	// pins maps an org's install of a biome to the version its effective grant approved.
	pins map[grant.Scope]string
	// pinned holds the entries of pinned versions other than the catalog's own, by
	// biome@version and ref.
	pinned map[string]map[string]*Entry
	// grants are the store's grants this snapshot was built from.
	grants []store.Grant
	// visible caches AllFor per org: the snapshot never changes.
	visible sync.Map // org → []*Entry
	derived sync.Map // key → what Derived built
}

// Derived returns what build makes of the snapshot for key (an index, a graph), built on
// first use and shared read-only: the snapshot never changes, so neither does what is
// derived from it, and it is dropped with the snapshot. Two first uses racing may both
// build; one result is kept.
func (s *Snapshot) Derived(key string, build func() any) any {
	if v, ok := s.derived.Load(key); ok {
		return v
	}
	v, _ := s.derived.LoadOrStore(key, build())
	return v
}

// Get returns the catalog's own entry for ref, whoever asks.
func (s *Snapshot) Get(ref string) (*Entry, bool) {
	e, ok := s.byRef[ref]
	return e, ok
}

// All returns every entry sorted by ref.
func (s *Snapshot) All() []*Entry { return s.sorted }

// Pinned returns the entries of versions effective grants approved where they differ from
// the catalog's own entries.
func (s *Snapshot) Pinned() []*Entry {
	var out []*Entry
	for _, byRef := range s.pinned {
		for _, e := range byRef {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Ref()+"@"+out[i].Capability.BiomeVersion < out[j].Ref()+"@"+out[j].Capability.BiomeVersion
	})
	return out
}

// visibleLifecycles are the states in which a ref exists for callers: proposed and seeded
// refs are answered exactly as unknown ones.
var visibleLifecycles = map[string]bool{store.LifecyclePublished: true, store.LifecycleDeprecated: true,
	store.LifecycleRetired: true}

// For returns ref as a caller of org sees it: absent unless published (or deprecated,
// retired) and of a biome of the operator's store or of org itself; at the version org's
// grant approved when that differs from the catalog's own.
func (s *Snapshot) For(org, ref string) (*Entry, bool) {
	e, ok := s.byRef[ref]
	if !ok || !visibleLifecycles[e.Capability.Lifecycle] {
		return nil, false
	}
	if owner := s.owners[e.Capability.BiomeID]; owner != "" && owner != org {
		return nil, false
	}
	if v, ok := s.pins[grant.Scope{Org: org, Biome: e.Capability.BiomeID}]; ok && v != e.Capability.BiomeVersion {
		if p, ok := s.pinned[e.Capability.BiomeID+"@"+v][ref]; ok {
			return p, true
		}
	}
	return e, true
}

// AllFor returns every entry a caller of org sees, sorted by ref; computed once per org and
// snapshot, shared read-only.
func (s *Snapshot) AllFor(org string) []*Entry {
	if v, ok := s.visible.Load(org); ok {
		return v.([]*Entry)
	}
	out := make([]*Entry, 0, len(s.sorted))
	for _, e := range s.sorted {
		if v, ok := s.For(org, e.Ref()); ok {
			out = append(out, v)
		}
	}
	v, _ := s.visible.LoadOrStore(org, out) // bounded by the orgs that call while it serves
	return v.([]*Entry)
}

// Reader is the store as the catalog reads it to build a snapshot (store.Store).
type Reader interface {
	// Revision is the store's revision, bumped by every write a snapshot depends on.
	Revision(ctx context.Context) (int64, error)
	ListCapabilities(ctx context.Context) ([]store.Capability, error)
	GetBiomeVersion(ctx context.Context, id, version string) (store.BiomeVersion, error)
	BiomeOwners(ctx context.Context) (map[string]string, error)
	ListGrants(ctx context.Context) ([]store.Grant, error)
}

// Catalog holds the current snapshot.
type Catalog struct {
	store Reader
	snap  atomic.Pointer[Snapshot]

	mu       sync.Mutex
	compiled map[string]compiledSchema // by ref@version; reused while the manifest is unchanged
	versions map[string]parsedVersion  // by biome@version: stored versions never change
}

// parsedVersion is a stored biome version and its contributions as catalog entries.
type parsedVersion struct {
	bv   store.BiomeVersion
	caps []store.Capability
}

type compiledSchema struct {
	manifest string
	schema   *inputschema.Schema
	output   *inputschema.Schema
}

// New returns a catalog over st; call Reload before use.
func New(st Reader) *Catalog {
	c := &Catalog{store: st, compiled: map[string]compiledSchema{}, versions: map[string]parsedVersion{}}
	c.snap.Store(&Snapshot{byRef: map[string]*Entry{}})
	return c
}

// SnapshotOf is a snapshot of entries as they are: all of the operator's store, nothing
// pinned. For tests and benchmarks of what reads snapshots (search at 100,000 capabilities
// without publishing them).
func SnapshotOf(revision int64, entries []*Entry) *Snapshot {
	s := &Snapshot{Revision: revision, byRef: make(map[string]*Entry, len(entries)), sorted: slices.Clone(entries)}
	for _, e := range entries {
		s.byRef[e.Ref()] = e
	}
	sort.Slice(s.sorted, func(i, j int) bool { return s.sorted[i].Ref() < s.sorted[j].Ref() })
	return s
}

// Snapshot returns the current snapshot; never nil.
func (c *Catalog) Snapshot() *Snapshot { return c.snap.Load() }

// Reload rebuilds the snapshot from the store. A capability whose stored manifest no longer
// parses or compiles is left out and logged: it cannot be validated, so it cannot be invoked.
func (c *Catalog) Reload(ctx context.Context) (*Snapshot, error) {
	rev, err := c.store.Revision(ctx)
	if err != nil {
		return nil, fmt.Errorf("catalog reload: %w", err)
	}
	caps, err := c.store.ListCapabilities(ctx)
	if err != nil {
		return nil, fmt.Errorf("catalog reload: %w", err)
	}
	grants, err := c.store.ListGrants(ctx)
	if err != nil {
		return nil, fmt.Errorf("catalog reload: %w", err)
	}
	owners, err := c.store.BiomeOwners(ctx)
	if err != nil {
		return nil, fmt.Errorf("catalog reload: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &Snapshot{Revision: rev, byRef: make(map[string]*Entry, len(caps)), owners: owners,
		pins: map[grant.Scope]string{}, pinned: map[string]map[string]*Entry{}, grants: grants}
	for _, capa := range caps {
		e, err := c.entry(capa)
		if err != nil {
			slog.Error("capability left out of the catalog", "ref", capa.Ref, "err", err)
			continue
		}
		s.byRef[capa.Ref] = e
		s.sorted = append(s.sorted, e)
	}
	sort.Slice(s.sorted, func(i, j int) bool { return s.sorted[i].Ref() < s.sorted[j].Ref() })
	if err := c.pin(ctx, s, grants); err != nil {
		return nil, fmt.Errorf("catalog reload: %w", err)
	}
	c.snap.Store(s)
	return s, nil
}

// pin records the version each effective grant approved and builds the entries of those
// versions that differ from the catalog's own, so calls under a grant run what it approved.
func (c *Catalog) pin(ctx context.Context, s *Snapshot, grants []store.Grant) error {
	for scope, g := range grant.Effective(grants) {
		s.pins[scope] = g.BiomeVersion
		key := g.BiomeID + "@" + g.BiomeVersion
		if _, done := s.pinned[key]; done {
			continue
		}
		pv, err := c.version(ctx, g.BiomeID, g.BiomeVersion)
		if err != nil {
			return err
		}
		byRef := map[string]*Entry{}
		for _, capa := range pinnedAt(s.byRef, pv.caps) {
			e, err := c.entry(capa)
			if err != nil {
				slog.Error("pinned capability left out of the catalog", "ref", capa.Ref, "version", capa.BiomeVersion, "err", err)
				continue
			}
			byRef[capa.Ref] = e
		}
		s.pinned[key] = byRef
	}
	return nil
}

// pinnedAt is the part of a granted version's capabilities that differs from the catalog's own
// entries (byRef), with the catalog's lifecycle and, where no invocation is declared, its
// runner kind (served by its provider: kernel, binding, MCP server).
func pinnedAt(byRef map[string]*Entry, caps []store.Capability) []store.Capability {
	var out []store.Capability
	for _, capa := range caps {
		cur, ok := byRef[capa.Ref]
		if !ok || cur.Capability.BiomeID != capa.BiomeID || cur.Capability.BiomeVersion == capa.BiomeVersion {
			continue
		}
		capa.Lifecycle, capa.ReplacedBy = cur.Capability.Lifecycle, cur.Capability.ReplacedBy
		if capa.Invocation == nil {
			capa.RunnerKind = cur.Capability.RunnerKind
		}
		out = append(out, capa)
	}
	return out
}

// version returns a stored biome version with its capabilities, read and parsed once: a
// stored version never changes (other content under the same version is refused). c.mu held.
func (c *Catalog) version(ctx context.Context, id, version string) (parsedVersion, error) {
	key := id + "@" + version
	if pv, ok := c.versions[key]; ok {
		return pv, nil
	}
	bv, err := c.store.GetBiomeVersion(ctx, id, version)
	if err != nil {
		return parsedVersion{}, fmt.Errorf("granted biome %s@%s: %w", id, version, err)
	}
	b, problems := fromSubmission(bv.Manifest, contributionsOf(bv))
	if len(problems) > 0 {
		return parsedVersion{}, fmt.Errorf("granted biome %s@%s no longer validates: %v", id, version, problems[0])
	}
	pv := parsedVersion{bv: bv, caps: make([]store.Capability, 0, len(b.Contributions))}
	for _, contrib := range b.Contributions {
		capa, err := capabilityOf(b, contrib)
		if err != nil {
			return parsedVersion{}, err
		}
		pv.caps = append(pv.caps, capa)
	}
	c.versions[key] = pv
	return pv, nil
}

func (c *Catalog) entry(capa store.Capability) (*Entry, error) {
	e := &Entry{Capability: capa}
	if err := json.Unmarshal(capa.Manifest, &e.Manifest); err != nil {
		return nil, fmt.Errorf("stored manifest: %w", err)
	}
	if len(capa.Invocation) > 0 && string(capa.Invocation) != "null" {
		e.Invocation = &manifest.Invocation{}
		if err := json.Unmarshal(capa.Invocation, e.Invocation); err != nil {
			return nil, fmt.Errorf("stored invocation: %w", err)
		}
	}
	e.resourceProp = manifest.ResourceProperty(e.Manifest.InputSchema)
	key := capa.Ref + "@" + capa.BiomeVersion
	if cs, ok := c.compiled[key]; ok && cs.manifest == string(capa.Manifest) {
		telemetry.Cache("catalog_schema", true)
		e.Input, e.Output = cs.schema, cs.output
		return e, nil
	}
	telemetry.Cache("catalog_schema", false)
	schema, err := inputschema.Compile(capa.Ref, e.Manifest.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	// An output schema that does not compile cannot check outputs: the entry is left out
	// (fail closed), as for an input schema; publishing refuses it in the first place.
	output, err := inputschema.CompileOutput(capa.Ref, e.Manifest.OutputSchema)
	if err != nil {
		return nil, fmt.Errorf("output schema: %w", err)
	}
	c.compiled[key] = compiledSchema{manifest: string(capa.Manifest), schema: schema, output: output}
	e.Input, e.Output = schema, output
	return e, nil
}

// Resource returns the resource the input names, or "" when the schema marks none.
func (e *Entry) Resource(input json.RawMessage) string {
	if e.resourceProp == "" {
		return ""
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(input, &obj) != nil {
		return ""
	}
	var v string
	if json.Unmarshal(obj[e.resourceProp], &v) != nil {
		return ""
	}
	return v
}
