package server

import (
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
)

// BundleSource is the policy engine's current bundle in OPA's format and its ETag, quoted.
type BundleSource interface {
	Bundle() (tarGz []byte, etag string)
}

// bundle serves GET /v1/bundles/xema.tar.gz so a stock OPA (sidecar, Envoy ext_authz) can
// enforce the same decisions. The bundle holds every grant of every org, so it is served
// only to the subjects the operator names (xema serve --bundle-reader); org admins, agents
// and every other service subject (a provider replaying a token included) get 403.
func (s *Server) bundle(c echo.Context) error {
	ec := execOf(c)
	if !slices.Contains(s.BundleReaders, ec.Subject.Ref) {
		return fault.New(fault.Denied, gateway.CodeDenied, "the policy bundle is served only to the subjects the operator names (xema serve --bundle-reader)")
	}
	body, etag := s.Bundles.Bundle()
	if len(body) == 0 {
		return fault.New(fault.Unavailable, gateway.CodePolicyUnavailable, "no policy bundle loaded")
	}
	c.Response().Header().Set("ETag", etag)
	if c.Request().Header.Get("If-None-Match") == etag {
		return c.NoContent(http.StatusNotModified)
	}
	return c.Blob(http.StatusOK, "application/gzip", body)
}
