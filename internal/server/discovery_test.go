package server

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestCORS(t *testing.T) {
	s := &Server{CORSOrigins: []string{"https://app.example"}}
	reached := false
	h := s.cors(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { reached = true; w.WriteHeader(http.StatusUnauthorized) }))
	for _, tc := range []struct {
		name, method, origin, acrm string
		status                     int
		allow                      string
		reached                    bool
	}{
		{"listed preflight", http.MethodOptions, "https://app.example", "POST", http.StatusNoContent, "https://app.example", false},
		{"unlisted preflight", http.MethodOptions, "https://evil.example", "POST", http.StatusNoContent, "", false},
		{"options without preflight headers", http.MethodOptions, "https://app.example", "", http.StatusUnauthorized, "https://app.example", true},
		{"listed call", http.MethodPost, "https://app.example", "", http.StatusUnauthorized, "https://app.example", true},
		{"unlisted call", http.MethodPost, "https://evil.example", "", http.StatusUnauthorized, "", true},
		{"no origin", http.MethodPost, "", "", http.StatusUnauthorized, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reached = false
			req := httptest.NewRequest(tc.method, "/mcp", nil)
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			if tc.acrm != "" {
				req.Header.Set("Access-Control-Request-Method", tc.acrm)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != tc.status || w.Header().Get("Access-Control-Allow-Origin") != tc.allow || reached != tc.reached {
				t.Errorf("status %d allow %q reached %v", w.Code, w.Header().Get("Access-Control-Allow-Origin"), reached)
			}
		})
	}
}

func TestChallenge(t *testing.T) {
	for _, tc := range []struct {
		name, public, auth, want string
	}{
		{"from host", "", "", `Bearer resource_metadata="http://gw.local/.well-known/oauth-protected-resource"`},
		{"public url", "https://xema.example/", "", `Bearer resource_metadata="https://xema.example/.well-known/oauth-protected-resource"`},
		{"refused token", "", "Bearer x", `Bearer resource_metadata="http://gw.local/.well-known/oauth-protected-resource", error="invalid_token"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{PublicURL: tc.public}
			req := httptest.NewRequest(http.MethodPost, "http://gw.local/mcp", nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			w := httptest.NewRecorder()
			s.challenge(w, req)
			if got := w.Header().Get("WWW-Authenticate"); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
