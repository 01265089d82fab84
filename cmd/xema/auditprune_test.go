package main

import (
	"testing"
	"time"
)

// TestParseRetention: days and Go durations; anything else, negative or absurd, is refused.
func TestParseRetention(t *testing.T) {
	for in, want := range map[string]time.Duration{"90d": 90 * 24 * time.Hour, "0d": 0, "36h": 36 * time.Hour, "0": 0} {
		if got, err := parseRetention(in); err != nil || got != want {
			t.Errorf("parseRetention(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "90", "d", "-1d", "1.5d", "99999d", "-3h", "90x", "ninety"} {
		if _, err := parseRetention(in); err == nil {
			t.Errorf("parseRetention(%q) succeeded", in)
		}
	}
	d := 90 * 24 * time.Hour
	if s := (retention{&d}).String(); s != "90d" {
		t.Errorf("String = %q", s)
	}
}
