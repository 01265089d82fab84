package main

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestMCPServerRegisterOAuthFlagsNeedOAuth: an OAuth flag without --auth oauth is a usage
// error, before any request (it would be dropped silently otherwise).
func TestMCPServerRegisterOAuthFlagsNeedOAuth(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	base := []string{"mcp-server", "register", "tools", "--url", "https://mcp.example/mcp", "--server", srv.URL, "--token", "t"}
	for _, extra := range [][]string{{"--owner", "user"}, {"--client-id", "c"}, {"--client-secret-ref", "cred_x"}, {"--scope", "s"},
		{"--auth", "service-token", "--owner", "org"}} {
		requests.Store(0)
		out, code := runXema(t, append(base, extra...)...)
		if code != 2 || requests.Load() != 0 {
			t.Errorf("%v: exit %d after %d requests, want 2 after none:\n%s", extra, code, requests.Load(), out)
		}
	}
	if out, code := runXema(t, append(base, "--auth", "oauth", "--owner", "user")...); code != 0 || requests.Load() != 1 {
		t.Errorf("with --auth oauth: exit %d after %d requests:\n%s", code, requests.Load(), out)
	}
}
