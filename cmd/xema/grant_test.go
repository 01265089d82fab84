package main

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestGrantCreateChecksFlagsFirst: a usage error of `xema grant create` exits 2 before any
// request, the digest's GET included.
func TestGrantCreateChecksFlagsFirst(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"digest":{"hash":"sha256:x"}}`))
	}))
	defer srv.Close()
	base := []string{"grant", "create", "--server", srv.URL, "--token", "t", "--biome", "ticketing", "--version", "1.0.0"}
	for name, extra := range map[string][]string{
		"bad rate":              {"--rate", "ticketing:ticket.create@1=fast"},
		"since without dry run": {"--since", "24h"},
	} {
		requests.Store(0)
		out, code := runXema(t, append(base, extra...)...)
		if code != 2 || requests.Load() != 0 {
			t.Errorf("%s: exit %d after %d requests, want 2 after none:\n%s", name, code, requests.Load(), out)
		}
	}
}
