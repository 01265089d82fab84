// Package buildinfo names the running binary: its module version and the commit it was built
// from, read from the build information the Go toolchain stamps into every binary.
package buildinfo

import (
	"fmt"
	"runtime/debug"
)

// Info is what `xema version` prints and MCP's serverInfo reports.
type Info struct {
	// Version is the module version: a release tag (v1.2.3) when installed with `go install
	// ...@version`, a pseudo-version, or "(devel)" for a build from a checkout.
	Version string `json:"version"`
	// Commit is the VCS revision (vcs.revision), "" when the build had no VCS information.
	Commit string `json:"commit,omitempty"`
	// CommitTime is the revision's time (vcs.time), RFC 3339.
	CommitTime string `json:"commitTime,omitempty"`
	// Modified is whether the work tree had uncommitted changes (vcs.modified).
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
}

// commit and version are set with -ldflags "-X" where the toolchain cannot stamp VCS
// information (a git worktree, whose .git is a file; a source tarball): the Makefile does.
// The stamped build information wins when present.
var commit, version string

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = &debug.BuildInfo{}
	}
	in := fromBuildInfo(bi)
	if in.Commit == "" {
		in.Commit = commit
	}
	if in.Version == "(devel)" && version != "" {
		in.Version = version
	}
	return in
}

func fromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Commit = s.Value
		case "vcs.time":
			in.CommitTime = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// Short is the version with the short commit, e.g. "v1.2.0" or "(devel)+3f1c2a9e4b1d-dirty":
// the serverInfo version of MCP.
func (in Info) Short() string {
	if in.Commit == "" {
		return in.Version
	}
	c := in.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	if in.Modified {
		c += "-dirty"
	}
	return in.Version + "+" + c
}

// String is the line `xema version` prints.
func (in Info) String() string {
	s := "xema " + in.Version
	if in.Commit != "" {
		s += " commit " + in.Commit
		if in.Modified {
			s += " (modified)"
		}
	}
	if in.CommitTime != "" {
		s += " built from " + in.CommitTime
	}
	return s + fmt.Sprintf(" %s", in.GoVersion)
}
