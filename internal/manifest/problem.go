package manifest

import (
	"cmp"
	"slices"
)

// Problem is one reason a biome or contribution is invalid.
type Problem struct {
	// File is the file the problem is in, relative to the biome directory with forward
	// slashes (biome.json, contributions/x.capability.contribution.json), or the label the
	// caller gave (ingestion API).
	File string `json:"file"`
	// Path is an RFC 6901 JSON pointer to the offending value in File; "" is the whole file.
	Path    string `json:"path"`
	Message string `json:"message"`
}

// String formats the problem as `FILE: POINTER: MESSAGE`, or `FILE: MESSAGE` when the
// problem is about the whole file.
func (p Problem) String() string {
	if p.Path == "" {
		return p.File + ": " + p.Message
	}
	return p.File + ": " + p.Path + ": " + p.Message
}

// sortProblems orders problems deterministically: biome.json first, then by file, pointer
// and message, and drops exact duplicates (one broken value can fail two keywords alike).
func sortProblems(ps []Problem) []Problem {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		if c := cmp.Compare(rank(a.File), rank(b.File)); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Path, b.Path), cmp.Compare(a.Message, b.Message))
	})
	return slices.Compact(ps)
}

func rank(file string) int {
	if file == BiomeFile {
		return 0
	}
	return 1
}
