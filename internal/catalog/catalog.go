// Package catalog is the gateway's view of the capability catalog: the store's capabilities
// with their parsed manifests and compiled input schemas, swapped atomically whenever the
// store's revision moves. The store stays the system of record; this is its read index.
package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/xemahq/xema/internal/inputschema"
	"github.com/xemahq/xema/internal/manifest"
	"github.com/xemahq/xema/internal/store"
)

// Entry is one capability ready for the funnel.
type Entry struct {
	Capability store.Capability
	Manifest   manifest.Manifest
	Invocation *manifest.Invocation
	Input      *inputschema.Schema

	resourceProp string
}

// Ref is the entry's capability ref.
func (e *Entry) Ref() string { return e.Capability.Ref }

// Snapshot is an immutable catalog at one store revision.
type Snapshot struct {
	Revision int64
	byRef    map[string]*Entry
	sorted   []*Entry
}

// Get returns the entry for ref.
func (s *Snapshot) Get(ref string) (*Entry, bool) {
	e, ok := s.byRef[ref]
	return e, ok
}

// All returns every entry sorted by ref.
func (s *Snapshot) All() []*Entry { return s.sorted }

// Catalog holds the current snapshot.
type Catalog struct {
	store store.Store
	snap  atomic.Pointer[Snapshot]

	mu       sync.Mutex
	compiled map[string]compiledSchema // by ref; reused while the manifest is unchanged
}

type compiledSchema struct {
	manifest string
	schema   *inputschema.Schema
}

// New returns a catalog over st; call Reload before use.
func New(st store.Store) *Catalog {
	c := &Catalog{store: st, compiled: map[string]compiledSchema{}}
	c.snap.Store(&Snapshot{byRef: map[string]*Entry{}})
	return c
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
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &Snapshot{Revision: rev, byRef: make(map[string]*Entry, len(caps))}
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
	c.snap.Store(s)
	return s, nil
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
	e.resourceProp = resourceProperty(e.Manifest.InputSchema)
	if cs, ok := c.compiled[capa.Ref]; ok && cs.manifest == string(capa.Manifest) {
		e.Input = cs.schema
		return e, nil
	}
	schema, err := inputschema.Compile(capa.Ref, e.Manifest.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	c.compiled[capa.Ref] = compiledSchema{manifest: string(capa.Manifest), schema: schema}
	e.Input = schema
	return e, nil
}

// ResourceAnnotation marks the top-level input property whose value names the resource a
// call acts on (checked against the grant's resource globs).
const ResourceAnnotation = "x-xema-resource"

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

// resourceProperty finds the top-level property marked with ResourceAnnotation.
func resourceProperty(schema map[string]any) string {
	props, _ := schema["properties"].(map[string]any)
	for name, p := range props {
		if ps, ok := p.(map[string]any); ok && ps[ResourceAnnotation] == true {
			return name
		}
	}
	return ""
}
