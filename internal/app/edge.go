package app

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/xemahq/xema/internal/console"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/server"
	"github.com/xemahq/xema/internal/txntoken"
)

// Edge is what the HTTP and MCP surfaces take besides the app's parts: the listener's
// settings the operator chose (xema serve's flags) and the identity provider's handlers.
type Edge struct {
	// Auth verifies the bearer tokens; Mounts are its routes (the development issuer's JWKS
	// and token endpoints), by path.
	Auth   server.Authenticator
	Mounts map[string]http.Handler
	// IssuerJWKS is the development issuer's key set, served with the Txn-Token keys at
	// /.well-known/jwks.json; nil with an external issuer.
	IssuerJWKS json.RawMessage
	// Issuer is the configured OIDC issuer ("" with the development issuer), named as the
	// authorization server in the RFC 9728 metadata.
	Issuer          string
	BundleReaders   []string
	MetricsReaders  []string
	BodyReadTimeout time.Duration
	CORSOrigins     []string
	PublicURL       string
	ConsoleOIDC     *console.OIDC
}

// Server builds the HTTP and MCP surfaces over the app's parts, with the MCP endpoint mounted.
func (a *App) Server(e Edge) (*server.Server, error) {
	srv := &server.Server{Gateway: a.Gateway, Tools: a.Tools, Idempotency: a.Idempotency, Environments: a.Environments(),
		Audit: a.Store, Approvals: a.Approvals, OperatorOrg: a.cfg.OperatorOrg, Auth: e.Auth, Ready: a.Ready, Bundles: a.Policy,
		Mounts: map[string]http.Handler{}, BundleReaders: e.BundleReaders, BodyReadTimeout: e.BodyReadTimeout,
		CORSOrigins: e.CORSOrigins, PublicURL: e.PublicURL, ConsoleOIDC: e.ConsoleOIDC, MetricsReaders: e.MetricsReaders}
	if e.Issuer != "" {
		srv.AuthorizationServers = []string{e.Issuer}
	}
	if a.Connections != nil {
		srv.Connector = a.Federation
	}
	for path, h := range e.Mounts {
		srv.Mounts[path] = h
	}
	jwks, err := txntoken.Handler(a.TxnTokens, e.IssuerJWKS)
	if err != nil {
		return nil, err
	}
	srv.Mounts[identity.JWKSPath] = jwks
	srv.Mounts["/mcp"] = srv.MCPHandler()
	return srv, nil
}
