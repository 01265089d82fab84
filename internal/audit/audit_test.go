package audit

import (
	"regexp"
	"testing"
	"time"
)

// Ids sort by the time they were made (to the millisecond), and are unique within one.
func TestNewIDSortsByTime(t *testing.T) {
	shape := regexp.MustCompile(`^inv_[0-9a-v]{26}$`)
	base := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	seen := map[string]bool{}
	prev := ""
	for i := range 2000 {
		// Every millisecond across 2 s, then across years: the byte order follows.
		at := base.Add(time.Duration(i) * time.Millisecond)
		if i >= 1000 {
			at = base.AddDate(i-999, 0, 0)
		}
		id := newID("inv_", at)
		if !shape.MatchString(id) {
			t.Fatalf("id %q: want inv_ and 26 base32hex digits", id)
		}
		if id <= prev {
			t.Fatalf("id %q made at %v sorts before %q", id, at, prev)
		}
		prev = id
		same := newID("inv_", at)
		if seen[id] || seen[same] || id == same {
			t.Fatalf("ids of one millisecond repeat: %q, %q", id, same)
		}
		seen[id], seen[same] = true, true
	}
}

// Approval ids keep the format their capabilities' schemas publish.
func TestRandomIDShape(t *testing.T) {
	shape := regexp.MustCompile(`^apr_[a-z2-7]{16}$`)
	if a, b := RandomID("apr_"), RandomID("apr_"); !shape.MatchString(a) || a == b {
		t.Fatalf("approval ids %q, %q: want distinct matches of %s", a, b, shape)
	}
}
