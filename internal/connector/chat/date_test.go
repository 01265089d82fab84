package chat

import (
	"testing"
	"time"
)

func TestTelegramDate(t *testing.T) {
	for _, c := range []struct {
		in   int64
		want string // "" is now
	}{
		{1767225600, "2026-01-01T00:00:00Z"},
		{1767225600123, "2026-01-01T00:00:00Z"},
		{0, ""},
		{-5, ""},
	} {
		got := telegramDate(c.in).UTC().Format(time.RFC3339)
		if c.want == "" {
			if time.Since(telegramDate(c.in)) > time.Hour {
				t.Errorf("telegramDate(%d) = %s, want now", c.in, got)
			}
			continue
		}
		if got != c.want {
			t.Errorf("telegramDate(%d) = %s, want %s", c.in, got, c.want)
		}
	}
}
