package store

import (
	"encoding/json"
	"fmt"
	"time"
)

// Stamp is the form in which every engine keeps a time: UTC, whole microseconds (the
// precision of PostgreSQL). The zero time means "now".
func Stamp(t time.Time) time.Time {
	if t.IsZero() {
		t = time.Now()
	}
	return t.UTC().Truncate(time.Microsecond)
}

// IsLifecycle reports whether s is one of the five lifecycle states.
func IsLifecycle(s string) bool {
	switch s {
	case LifecycleProposed, LifecycleSeeded, LifecyclePublished, LifecycleDeprecated, LifecycleRetired:
		return true
	}
	return false
}

func invalid(what, field, problem string) error {
	return fmt.Errorf("%w: %s: %s %s", ErrInvalid, what, field, problem)
}

// field is a named string value of a record, for required.
type field struct{ name, value string }

func required(what string, fields ...field) error {
	for _, f := range fields {
		if f.value == "" {
			return invalid(what, f.name, "is required")
		}
	}
	return nil
}

// doc is a named JSON document of a record, for jsonDocs.
type doc struct {
	name string
	doc  json.RawMessage
}

func jsonDocs(what string, required bool, docs ...doc) error {
	for _, d := range docs {
		if len(d.doc) == 0 {
			if required {
				return invalid(what, d.name, "is required")
			}
			continue
		}
		if !json.Valid(d.doc) {
			return invalid(what, d.name, "is not valid JSON")
		}
	}
	return nil
}

// Validate checks what the store itself requires of a biome version.
func (bv BiomeVersion) Validate() error {
	what := fmt.Sprintf("biome %q version %q", bv.ID, bv.Version)
	if err := required(what, field{"ID", bv.ID}, field{"Version", bv.Version}, field{"ContentHash", bv.ContentHash}); err != nil {
		return err
	}
	if err := jsonDocs(what, true, doc{"Manifest", bv.Manifest}); err != nil {
		return err
	}
	return jsonDocs(what, false, doc{"Contributions", bv.Contributions}, doc{"Digest", bv.Digest})
}

// Validate checks what the store itself requires of a catalog entry.
func (c Capability) Validate() error {
	what := fmt.Sprintf("capability %q", c.Ref)
	if err := required(what, field{"Ref", c.Ref}, field{"BiomeID", c.BiomeID}); err != nil {
		return err
	}
	if !IsLifecycle(c.Lifecycle) {
		return invalid(what, "Lifecycle", fmt.Sprintf("%q is not a lifecycle state", c.Lifecycle))
	}
	if err := jsonDocs(what, true, doc{"Manifest", c.Manifest}); err != nil {
		return err
	}
	return jsonDocs(what, false, doc{"Invocation", c.Invocation})
}

// Validate checks what the store itself requires of a lifecycle transition.
func (ev LifecycleEvent) Validate() error {
	what := fmt.Sprintf("lifecycle transition of %q", ev.Ref)
	if err := required(what, field{"Ref", ev.Ref}, field{"Actor", ev.Actor}); err != nil {
		return err
	}
	for _, f := range []field{{"From", ev.From}, {"To", ev.To}} {
		if !IsLifecycle(f.value) {
			return invalid(what, f.name, fmt.Sprintf("%q is not a lifecycle state", f.value))
		}
	}
	return nil
}

// Validate checks what the store itself requires of a grant.
func (g Grant) Validate() error {
	what := fmt.Sprintf("grant %q", g.ID)
	if err := required(what, field{"ID", g.ID}, field{"Org", g.Org}, field{"BiomeID", g.BiomeID}, field{"BiomeVersion", g.BiomeVersion},
		field{"DigestHash", g.DigestHash}, field{"ApprovedBy", g.ApprovedBy}); err != nil {
		return err
	}
	return jsonDocs(what, false, doc{"Customize", g.Customize})
}

// Validate checks what the store itself requires of an audit record.
func (r AuditRecord) Validate() error {
	// Every call writes two records, each checked by its caller and again by the store's
	// batch: the record's name is formatted only for an error.
	if r.check("") == nil {
		return nil
	}
	return r.check(fmt.Sprintf("audit record %q", r.ID))
}

func (r AuditRecord) check(what string) error {
	if err := required(what, field{"ID", r.ID}, field{"Decision", r.Decision}); err != nil {
		return err
	}
	return jsonDocs(what, false, doc{"Reasons", r.Reasons}, doc{"Suggestions", r.Suggestions},
		doc{"Obligations", r.Obligations}, doc{"Detail", r.Detail}, doc{"PolicyInput", r.PolicyInput})
}
