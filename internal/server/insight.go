package server

import (
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/xemahq/xema/internal/insight"
)

// insightRoutes are what the console's overview and capability pages read, and who the
// caller is.
func (s *Server) insightRoutes(g *echo.Group) {
	g.GET("/stats", s.stats)
	g.GET("/catalog/:ref", s.capability)
	g.GET("/me", s.me)
}

// stats is GET /v1/stats?window=1h|24h|7d: audit:stats.get@1.
func (s *Server) stats(c echo.Context) error {
	window := "24h"
	for k, vs := range c.QueryParams() {
		if k != "window" || len(vs) != 1 {
			return invalidRequest("query parameter %q: only window (1h, 24h or 7d), once, is accepted", k)
		}
		window = vs[0]
	}
	raw, _ := json.Marshal(map[string]string{"window": window}) // a map of strings always encodes
	return s.kernelCall(c, insight.RefStats, raw, http.StatusOK)
}

// capability is GET /v1/catalog/{ref}: catalog:capability.get@1.
func (s *Server) capability(c echo.Context) error {
	if len(c.QueryParams()) > 0 {
		return invalidRequest("no query parameter is accepted")
	}
	ref, err := pathParam(c, "ref")
	if err != nil {
		return err
	}
	raw, _ := json.Marshal(map[string]string{"ref": ref}) // a map of strings always encodes
	return s.kernelCall(c, insight.RefCapability, raw, http.StatusOK)
}

// me is GET /v1/me. It reads nothing but the verified token and the policy's answer for the
// caller, so it is not audited (like the audit search).
func (s *Server) me(c echo.Context) error {
	return c.JSON(http.StatusOK, s.Tools.Whoami(c.Request().Context(), execOf(c)))
}
