package timearg

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"24h", now.Add(-24 * time.Hour)},
		{"90m", now.Add(-90 * time.Minute)},
		{"2026-02-28T10:00:00Z", time.Date(2026, 2, 28, 10, 0, 0, 0, time.UTC)},
		{"2026-02-28T11:00:00+01:00", time.Date(2026, 2, 28, 10, 0, 0, 0, time.UTC)},
	} {
		got, err := Parse(tc.in, now)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "yesterday", "-1h", "0s", "2026-02-30T00:00:00Z", "1d"} {
		if _, err := Parse(bad, now); err == nil || !strings.Contains(err.Error(), "RFC 3339") {
			t.Errorf("Parse(%q) = %v, want an error naming both forms", bad, err)
		}
	}
	if d, err := Ago("2026-03-01T11:00:00Z", now); err != nil || d != time.Hour {
		t.Errorf("Ago = %v, %v; want 1h", d, err)
	}
	if _, err := Ago("2026-03-02T00:00:00Z", now); err == nil {
		t.Error("Ago of a future time succeeded")
	}
}
