// Package console is the web console served by `xema serve` under /console/: plain HTML, one
// stylesheet and one small vanilla script, embedded in the binary (no build step, no CDN, no
// font or script from anywhere but the gateway). The console has no privileges of its own:
// the browser calls the public /v1 API with the signed-in person's bearer token, kept in
// sessionStorage (never in a URL, a cookie or a log), so no request is ever authorized by
// ambient credentials and there is nothing for a cross-site request to forge.
package console

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed static
var static embed.FS

// Prefix is where the console is mounted.
const Prefix = "/console/"

// csp allows only the gateway's own script, style and API: no inline script, no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// FaviconPath is where browsers ask for a site's icon whatever the page names; the console's
// icon answers it.
const FaviconPath = "/favicon.ico"

// Handler serves the console with the development sign-in only (a pasted token).
func Handler() http.Handler { return New(nil) }

// New serves the console: /console/assets/* are the embedded files, /console/config.json
// tells the script how to sign in, POST /console/token exchanges an authorization code when
// oidc is set, and every other path under /console/ is the one page, whose script renders the
// view the path names (so each view is a deep link that survives reload).
func New(oidc *OIDC) http.Handler {
	assets, _ := fs.Sub(static, "static") // the embedded tree always has static/
	files := http.FileServer(http.FS(assets))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		if r.URL.Path == TokenPath {
			if oidc == nil {
				http.NotFound(w, r)
				return
			}
			oidc.exchange(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		p := path.Clean(r.URL.Path)
		if p == FaviconPath {
			p = "/console/assets/favicon.svg"
		}
		if rest, ok := strings.CutPrefix(p, "/console/assets/"); ok {
			if _, err := fs.Stat(assets, "assets/"+rest); err != nil {
				http.NotFound(w, r)
				return
			}
			h.Set("Cache-Control", "no-cache")
			r2 := r.Clone(r.Context())
			r2.URL.Path = "/assets/" + rest
			files.ServeHTTP(w, r2)
			return
		}
		if p == ConfigPath {
			h.Set("Content-Type", "application/json")
			h.Set("Cache-Control", "no-store")
			_ = json.NewEncoder(w).Encode(map[string]any{"oidc": oidc.public()})
			return
		}
		if r.URL.Path == "/console" {
			// The overview; the page itself sends a browser without a token to sign in.
			http.Redirect(w, r, Prefix, http.StatusFound)
			return
		}
		page, _ := fs.ReadFile(assets, "index.html") // embedded
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		_, _ = w.Write(page)
	})
}
