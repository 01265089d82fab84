package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	rev := "3f1c2a9e8b4d4c579a612b7e0f4d5c88aabbccdd"
	for _, tc := range []struct {
		name       string
		bi         debug.BuildInfo
		short, str string
	}{
		{"release", debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Version: "v1.2.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-01-01T00:00:00Z"}}},
			"v1.2.0+3f1c2a9e8b4d", "xema v1.2.0 commit " + rev + " built from 2026-01-01T00:00:00Z go1.26"},
		{"dirty checkout", debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}},
			"(devel)+3f1c2a9e8b4d-dirty", "xema (devel) commit " + rev + " (modified) go1.26"},
		{"no vcs", debug.BuildInfo{GoVersion: "go1.26"}, "(devel)", "xema (devel) go1.26"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := fromBuildInfo(&tc.bi)
			if in.Short() != tc.short || in.String() != tc.str {
				t.Errorf("Short %q String %q, want %q %q", in.Short(), in.String(), tc.short, tc.str)
			}
		})
	}
}
