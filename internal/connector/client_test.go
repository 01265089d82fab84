package connector

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/runner"
)

// An answer over MaxResponseBytes is refused, never cut and decoded as if whole.
func TestDoRefusesAnOversizedAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
		ok   bool
	}{{"at the bound", MaxResponseBytes, true}, {"one byte over", MaxResponseBytes + 1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = w.Write([]byte(strings.Repeat("x", tc.size)))
			}))
			defer srv.Close()
			r, err := Do(context.Background(), Target{HTTP: srv.Client()}, "gitea", Request{Method: http.MethodGet, URL: srv.URL})
			var re *fault.Error
			switch {
			case tc.ok && (err != nil || len(r.Body) != tc.size):
				t.Fatalf("answer of %d bytes: %v", tc.size, err)
			case !tc.ok && (!errors.As(err, &re) || re.Code != runner.CodeBadResponse):
				t.Fatalf("answer of %d bytes: %v, want %s", tc.size, err, runner.CodeBadResponse)
			}
		})
	}
}
