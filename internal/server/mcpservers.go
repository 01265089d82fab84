package server

import (
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/xemahq/xema/internal/federation"
)

// mcpServerRoutes are thin routes onto the federation's kernel capabilities, through the
// whole funnel like the biome routes.
func (s *Server) mcpServerRoutes(g *echo.Group) {
	g.POST("/mcp-servers", s.kernelRoute(federation.RefRegister))
	g.GET("/mcp-servers", s.mcpServerCall(federation.RefList, http.StatusOK, func(echo.Context) any { return map[string]any{} }))
	g.POST("/mcp-servers/:id/sync", s.mcpServerCall(federation.RefSync, http.StatusOK, func(c echo.Context) any {
		return map[string]string{"providerId": c.Param("id")}
	}))
}

// mcpServerCall invokes ref with the input built from the request path (no body).
func (s *Server) mcpServerCall(ref string, status int, input func(echo.Context) any) echo.HandlerFunc {
	return func(c echo.Context) error {
		raw, err := json.Marshal(input(c))
		if err != nil {
			return err
		}
		return s.kernelCall(c, ref, raw, status)
	}
}
