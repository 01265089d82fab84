package metatool

import (
	"slices"
	"testing"
)

// TestApplyCut: the first cut denies every undecided entry outside it and allows the
// undecided ones of its clean set (a clean position outside the cut stays denied), leaves
// the rest of the cut undecided and what was decided before as it was, applies once, and
// lists the admitted entries once all are decided.
func TestApplyCut(t *testing.T) {
	for _, tc := range []struct {
		name             string
		n                int
		before           map[int]bool // decided before the cut
		cut, clean       []int
		allowed, unknown []int
		list             []int // nil: not every entry decided
	}{
		{name: "one word", n: 10, cut: []int{1, 2, 3}, clean: []int{2}, allowed: []int{2}, unknown: []int{1, 3}},
		{name: "words and a tail", n: 130, cut: []int{0, 63, 64, 129}, clean: []int{63, 129}, allowed: []int{63, 129}, unknown: []int{0, 64}},
		{name: "decided before", n: 70, before: map[int]bool{1: true, 5: false, 69: true}, cut: []int{1, 5, 6}, clean: []int{5, 6},
			allowed: []int{1, 6, 69}, list: []int{1, 6, 69}},
		{name: "clean outside the cut", n: 8, cut: []int{1}, clean: []int{1, 2}, allowed: []int{1}, list: []int{1}},
		{name: "all decided", n: 64, cut: []int{3, 4}, clean: []int{3, 4}, allowed: []int{3, 4}, list: []int{3, 4}},
		{name: "empty cut", n: 3, list: []int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newAuthorizedSet(tc.n)
			for i, allowed := range tc.before {
				s.set(i, allowed)
			}
			s.applyCut(tc.cut, tc.clean)
			s.applyCut(nil, nil) // once: a second cut changes nothing
			var allowed, unknown []int
			for i := range tc.n {
				a, known := s.get(i)
				if a {
					allowed = append(allowed, i)
				}
				if !known {
					unknown = append(unknown, i)
				}
			}
			if !slices.Equal(allowed, tc.allowed) || !slices.Equal(unknown, tc.unknown) {
				t.Errorf("allowed %v, undecided %v; want %v, %v", allowed, unknown, tc.allowed, tc.unknown)
			}
			if got := s.admitted(); !slices.Equal(got, tc.list) || (got == nil) != (tc.list == nil) {
				t.Errorf("admitted %v, want %v", got, tc.list)
			}
		})
	}
}
