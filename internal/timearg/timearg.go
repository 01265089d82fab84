// Package timearg reads the time bounds every --since and --until of the CLI, and the audit
// search's since and until, take: an RFC 3339 time, or a duration ago such as 24h.
package timearg

import (
	"fmt"
	"time"
)

// Want is what an unreadable bound is told to be.
const Want = "want an RFC 3339 time such as 2026-03-01T12:00:00Z or a duration ago such as 24h or 90m"

// Parse reads s as an RFC 3339 time, or as a positive duration before now.
func Parse(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%q: %s", s, Want)
	}
	return now.Add(-d).UTC(), nil
}

// Ago reads s as Parse does and answers how long before now it is (at least 1s), for the
// APIs that take a window as a duration.
func Ago(s string, now time.Time) (time.Duration, error) {
	t, err := Parse(s, now)
	if err != nil {
		return 0, err
	}
	d := now.Sub(t).Round(time.Second)
	if d < time.Second {
		return 0, fmt.Errorf("%q: not in the past", s)
	}
	return d, nil
}
