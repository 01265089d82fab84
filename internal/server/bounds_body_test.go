package server

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkBoundBody: the body middleware's cost for a 4 KiB invoke body.
func BenchmarkBoundBody(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 4096)
	h := (&Server{}).boundBody(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("POST", "/v1/invoke", bytes.NewReader(body))
		h.ServeHTTP(w, r)
	}
}

// TestReadBody: the body is read whole whatever length was declared (exact, unknown, too
// short), and never more than MaxBodyBytes+1 bytes.
func TestReadBody(t *testing.T) {
	body := bytes.Repeat([]byte("abc"), 1000)
	for _, declared := range []int64{int64(len(body)), -1, 10, 0} {
		got, err := readBody(bytes.NewReader(body), declared)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("declared %d: %d bytes, %v; want the %d bytes", declared, len(got), err, len(body))
		}
	}
	huge := io.LimitReader(zeros{}, MaxBodyBytes+100)
	if got, err := readBody(huge, 5); err != nil || len(got) != MaxBodyBytes+1 {
		t.Fatalf("oversized body: %d bytes, %v; want %d", len(got), err, MaxBodyBytes+1)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
