package server

import (
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/xemahq/xema/internal/admin"
	"github.com/xemahq/xema/internal/gateway"
)

// adminRoutes are thin routes onto kernel capabilities: the body is the capability's input
// and the call goes through the whole funnel (authorized by the capability's humanBaseline).
func (s *Server) adminRoutes(g *echo.Group) {
	g.POST("/biomes", s.kernelRoute(admin.RefSubmit))
	g.POST("/grants", s.kernelRoute(admin.RefInstall))
	g.POST("/lifecycle", s.kernelRoute(admin.RefLifecycle))
}

func (s *Server) kernelRoute(ref string) echo.HandlerFunc {
	return func(c echo.Context) error {
		var input json.RawMessage
		if err := bind(c, &input); err != nil {
			return err
		}
		res, err := s.Gateway.Invoke(c.Request().Context(), execOf(c), gateway.Request{Ref: ref, Input: input})
		if err != nil {
			return err
		}
		c.Response().Header().Set("X-Xema-Audit-Id", res.AuditID)
		return c.JSON(http.StatusCreated, res.Output)
	}
}
