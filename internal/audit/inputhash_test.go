package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func TestInputHashIsKeyed(t *testing.T) {
	input := []byte(`{"secret":"hunter2"}`)
	unkeyed := sha256.Sum256(input)
	for _, tc := range []struct {
		name   string
		k1, k2 []byte
		in1    []byte
		in2    []byte
		equal  bool
	}{
		{"same key, same input", []byte("k1"), []byte("k1"), input, input, true},
		{"other key, same input", []byte("k1"), []byte("k2"), input, input, false},
		{"same key, other input", []byte("k1"), []byte("k1"), input, []byte(`{"secret":"hunter3"}`), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := InputHash(tc.k1, tc.in1), InputHash(tc.k2, tc.in2)
			if (a == b) != tc.equal {
				t.Fatalf("InputHash %s vs %s: equal=%v, want %v", a, b, a == b, tc.equal)
			}
			if !strings.HasPrefix(a, "hmac-sha256:") || strings.Contains(a, hex.EncodeToString(unkeyed[:])) {
				t.Fatalf("InputHash = %s: want a keyed HMAC, never the plain sha256", a)
			}
		})
	}
}
