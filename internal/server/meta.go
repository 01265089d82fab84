package server

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/xemahq/xema/internal/identity"
)

func (s *Server) metaRoutes(g *echo.Group) {
	gw := s.Tools
	g.POST("/capabilities/search", metaRoute(gw.Search))
	g.POST("/capabilities/describe", metaRoute(gw.Describe))
	g.POST("/capabilities/plan", metaRoute(gw.Plan))
	g.POST("/capabilities/preflight", metaRoute(gw.Preflight))
	g.POST("/capabilities/explain", metaRoute(gw.Explain))
}

// metaRoute adapts one meta-tool (request struct in, result out) to a route: strict body
// decoding, the verified caller, typed errors.
func metaRoute[Req, Res any](tool func(context.Context, identity.ExecContext, Req) (Res, error)) echo.HandlerFunc {
	return func(c echo.Context) error {
		var req Req
		if err := bind(c, &req); err != nil {
			return err
		}
		res, err := tool(c.Request().Context(), execOf(c), req)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, res)
	}
}
