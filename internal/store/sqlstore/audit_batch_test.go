package sqlstore

import (
	"slices"
	"testing"
)

// pow2Chunks covers the slice in order with chunks of power-of-two lengths up to the limit.
func TestPow2Chunks(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []int
	}{{0, nil}, {1, []int{1}}, {7, []int{4, 2, 1}}, {64, []int{64}}, {150, []int{64, 64, 16, 4, 2}}} {
		s := make([]int, tc.n)
		for i := range s {
			s[i] = i
		}
		var lens, seen []int
		for c := range pow2Chunks(s, 64) {
			lens = append(lens, len(c))
			seen = append(seen, c...)
		}
		if !slices.Equal(lens, tc.want) || !slices.Equal(seen, s) {
			t.Errorf("%d: chunks of %v covering %v, want %v covering it in order", tc.n, lens, seen, tc.want)
		}
	}
}
