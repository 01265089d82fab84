// Package capref parses capability references: the stable, versioned names
// `<domain>:<resource>.<verb>@<major>` every capability is called by.
package capref

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Pattern is the spec's grammar for a capability ref, verbatim.
const Pattern = `^[a-z][a-z0-9-]*:[a-z][a-z0-9-]*(\.[a-z][a-z0-9-]*)*@\d+$`

var pattern = regexp.MustCompile(Pattern)

// ErrInvalid is wrapped by every error Parse returns.
var ErrInvalid = errors.New("invalid capability ref")

// Ref is a parsed capability ref.
//
// The last dot-separated segment before `@` is always the Verb; the segments before it,
// joined by dots, are the Resource. A ref with a single segment (`artifact:read@1`,
// `mcp-tool:invoke@1`) acts on its domain as a whole, so its Resource is empty and its
// Verb is that segment: `connector:tracker.issue.create@1` has Resource "tracker.issue"
// and Verb "create".
type Ref struct {
	Domain   string
	Resource string // "" when the ref has no dot
	Verb     string
	Major    int
}

// Parse parses s with exactly the spec grammar (see Pattern), and additionally rejects a
// major with leading zeros (`@01`), so that each ref has one spelling and refs can be
// compared as strings, and a major that does not fit in an int.
func Parse(s string) (Ref, error) {
	if !pattern.MatchString(s) {
		return Ref{}, fmt.Errorf("%w %q: must match %s", ErrInvalid, s, Pattern)
	}
	name, major, _ := strings.Cut(s, "@")
	if len(major) > 1 && major[0] == '0' {
		return Ref{}, fmt.Errorf("%w %q: major version must not have leading zeros", ErrInvalid, s)
	}
	n, err := strconv.Atoi(major)
	if err != nil {
		return Ref{}, fmt.Errorf("%w %q: major version out of range", ErrInvalid, s)
	}
	domain, path, _ := strings.Cut(name, ":")
	r := Ref{Domain: domain, Verb: path, Major: n}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		r.Resource, r.Verb = path[:i], path[i+1:]
	}
	return r, nil
}

// MustParse is Parse for refs known at compile time; it panics on an invalid ref.
func MustParse(s string) Ref {
	r, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return r
}

// String prints the ref in its canonical form; Parse(r.String()) == r.
func (r Ref) String() string {
	var b strings.Builder
	b.Grow(len(r.Domain) + len(r.Resource) + len(r.Verb) + 8)
	b.WriteString(r.Domain)
	b.WriteByte(':')
	if r.Resource != "" {
		b.WriteString(r.Resource)
		b.WriteByte('.')
	}
	b.WriteString(r.Verb)
	b.WriteByte('@')
	b.WriteString(strconv.Itoa(r.Major))
	return b.String()
}
