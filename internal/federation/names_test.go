package federation

import (
	"testing"

	"github.com/xemahq/xema/internal/capref"
)

func TestToolName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"echo", "echo"},
		{"get-sum", "get-sum"},
		{"get_sum", "get-sum"},
		{"getSum", "get-sum"},
		{"GetTinyImage", "get-tiny-image"},
		{"HTTPServer", "http-server"},
		{"printEnv2Now", "print-env2-now"},
		{"a__b..c  d", "a-b-c-d"},
		{"_private_", "private"},
		{"2fa", "t-2fa"},
		{"weather.get", "weather-get"},
		{"überprüfen", "berpr-fen"},
		{"ABC", "abc"},
	} {
		got, err := ToolName(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ToolName(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			continue
		}
		if _, err := capref.Parse("p:" + got + "@1"); err != nil {
			t.Errorf("ToolName(%q) = %q does not form a ref: %v", tc.in, got, err)
		}
	}
	for _, bad := range []string{"", "___", "-.-", "日本"} {
		if got, err := ToolName(bad); err == nil {
			t.Errorf("ToolName(%q) = %q, want an error", bad, got)
		}
	}
}

func FuzzToolName(f *testing.F) {
	for _, s := range []string{"echo", "getSum", "__x", "9lives", "a.b_c-D"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, err := ToolName(name)
		if err != nil {
			return
		}
		if _, err := capref.Parse("p:" + got + "@1"); err != nil {
			t.Fatalf("ToolName(%q) = %q: %v", name, got, err)
		}
	})
}
