package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/xemahq/xema/internal/identity"
)

// ProtectedResourcePath is the RFC 9728 metadata of the gateway as an OAuth protected
// resource; ProtectedResourcePath+"/mcp" is the same for the MCP endpoint's own resource
// identifier (RFC 9728 §3.1 inserts the resource's path after the well-known prefix).
const ProtectedResourcePath = "/.well-known/oauth-protected-resource"

// baseURL is the gateway's public origin: Server.PublicURL when set (behind a proxy), else
// the scheme and Host of the request.
func (s *Server) baseURL(r *http.Request) string {
	if s.PublicURL != "" {
		return strings.TrimSuffix(s.PublicURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// challenge sets the RFC 6750/9728 WWW-Authenticate header of a 401: where the client finds
// the protected resource metadata, and invalid_token when a token was sent but refused.
func (s *Server) challenge(w http.ResponseWriter, r *http.Request) {
	params := []string{fmt.Sprintf("resource_metadata=%q", s.baseURL(r)+ProtectedResourcePath)}
	if r.Header.Get("Authorization") != "" {
		params = append(params, `error="invalid_token"`)
	}
	w.Header().Set("WWW-Authenticate", "Bearer "+strings.Join(params, ", "))
}

// protectedResource serves the RFC 9728 metadata: the resource, the configured issuer as its
// authorization server (none with the development issuer, whose tokens come from
// `xema dev token`, so its JWKS is named instead), header bearer tokens only. It is the
// go-sdk's oauthex.ProtectedResourceMetadata document; the SDK's own handler is not used
// because it grants every origin CORS, where this gateway grants only --cors-origin.
func (s *Server) protectedResource(suffix string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeJSON(w, http.StatusMethodNotAllowed, errorBody{Code: CodeMethodNotAllowed, Message: "GET only"})
			return
		}
		base := s.baseURL(r)
		md := oauthex.ProtectedResourceMetadata{
			Resource:               base + suffix,
			AuthorizationServers:   s.AuthorizationServers,
			BearerMethodsSupported: []string{"header"},
			ResourceName:           "Xema capability gateway",
		}
		if len(s.AuthorizationServers) == 0 {
			md.JWKSURI = base + identity.JWKSPath
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=300")
		_ = json.NewEncoder(w).Encode(md)
	})
}

// CORS headers of a granted origin.
const (
	corsMethods = "GET, POST, DELETE, OPTIONS"
	corsHeaders = "Authorization, Content-Type, Accept, Mcp-Session-Id, Mcp-Protocol-Version, Last-Event-ID"
	corsExpose  = "WWW-Authenticate, Mcp-Session-Id, Mcp-Protocol-Version, Retry-After"
)

// cors grants the origins of --cors-origin, and only them, the right to call the gateway
// from a browser. A preflight (OPTIONS with Origin and Access-Control-Request-Method) is
// answered here, before authentication, routing and audit: it carries no credentials and
// does nothing, so it is neither refused as unauthenticated nor recorded. An unlisted
// origin's preflight is answered without any grant, so the browser does not send the call.
func (s *Server) cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		preflight := r.Method == http.MethodOptions && origin != "" && r.Header.Get("Access-Control-Request-Method") != ""
		granted := origin != "" && slices.Contains(s.CORSOrigins, origin)
		if len(s.CORSOrigins) > 0 {
			w.Header().Add("Vary", "Origin")
		}
		if granted {
			w.Header().Set("Access-Control-Allow-Origin", origin)
			w.Header().Set("Access-Control-Expose-Headers", corsExpose)
		}
		if !preflight {
			next.ServeHTTP(w, r)
			return
		}
		if granted {
			w.Header().Add("Vary", "Access-Control-Request-Method, Access-Control-Request-Headers")
			w.Header().Set("Access-Control-Allow-Methods", corsMethods)
			w.Header().Set("Access-Control-Allow-Headers", corsHeaders)
			w.Header().Set("Access-Control-Max-Age", "600")
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
