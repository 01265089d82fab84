package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t *testing.T, path string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	return w
}

// TestDeepLinksServeThePage: every view path is the one page, with a CSP that allows only
// the gateway's own script and no framing, never cached.
func TestDeepLinksServeThePage(t *testing.T) {
	for _, p := range []string{"/console/", "/console/login", "/console/audit/deny_x", "/console/biomes/ticketing/1.0.0", "/console/approvals",
		"/console/capabilities/kb%3Apage.read%401", "/console/providers", "/console/connections"} {
		w := get(t, p)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `<script src="/console/assets/console.js"`) {
			t.Fatalf("%s: %d %q", p, w.Code, w.Body.String())
		}
		csp := w.Header().Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "connect-src 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", p, csp, want)
			}
		}
		if w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: headers %v", p, w.Header())
		}
	}
	// The overview is /console/ (the page sends a browser without a token to sign in).
	if w := get(t, "/console"); w.Code != http.StatusFound || w.Header().Get("Location") != "/console/" {
		t.Errorf("/console: %d %v", w.Code, w.Header())
	}
}

func TestAssets(t *testing.T) {
	for path, ctype := range map[string]string{"/console/assets/console.js": "javascript", "/console/assets/console.css": "text/css",
		"/console/assets/favicon.svg": "image/svg+xml", FaviconPath: "image/svg+xml"} {
		w := get(t, path)
		if w.Code != http.StatusOK || !strings.Contains(w.Header().Get("Content-Type"), ctype) {
			t.Errorf("%s: %d %s", path, w.Code, w.Header().Get("Content-Type"))
		}
	}
	if w := get(t, "/console/assets/nothing.js"); w.Code != http.StatusNotFound {
		t.Errorf("unknown asset: %d", w.Code)
	}
	w := httptest.NewRecorder()
	Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/console/login", nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", w.Code)
	}
}

// TestScriptKeepsTheTokenOutOfURLsAndStorage: the script stores the token in sessionStorage
// only and never writes API text as HTML.
func TestScriptKeepsTheTokenOutOfURLsAndStorage(t *testing.T) {
	js, err := static.ReadFile("static/assets/console.js")
	if err != nil {
		t.Fatal(err)
	}
	src := string(js)
	for _, banned := range []string{"localStorage.setItem", "document.cookie", "innerHTML", "outerHTML", "insertAdjacentHTML", "eval(", "new Function"} {
		if strings.Contains(src, banned) {
			t.Errorf("console.js uses %s", banned)
		}
	}
	if !strings.Contains(src, "sessionStorage.setItem(TOKEN_KEY") {
		t.Error("console.js does not keep the token in sessionStorage")
	}
	// The production sign-in: PKCE S256 from the browser's CSPRNG, the code out of the URL.
	for _, want := range []string{"crypto.getRandomValues", `code_challenge_method: "S256"`, `history.replaceState(null, "", "/console/callback")`} {
		if !strings.Contains(src, want) {
			t.Errorf("console.js lacks %s", want)
		}
	}
}
