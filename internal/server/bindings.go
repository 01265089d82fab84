package server

import (
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/xemahq/xema/internal/binding"
)

// bindingRoutes are /v1/bindings and /v1/credentials: thin routes onto the binding and
// credential admin capabilities, run through the whole funnel.
func (s *Server) bindingRoutes(g *echo.Group) {
	g.POST("/bindings", s.kernelRoute(binding.RefCreate))
	g.GET("/bindings", s.invokeAs(binding.RefList, http.StatusOK, noID))
	g.DELETE("/bindings/:id", s.invokeAs(binding.RefDelete, http.StatusOK, pathID))
	g.POST("/credentials", s.kernelRoute(binding.RefCredentialCreate))
	g.GET("/credentials", s.invokeAs(binding.RefCredentialList, http.StatusOK, noID))
	g.DELETE("/credentials/:id", s.invokeAs(binding.RefCredentialDelete, http.StatusOK, pathID))
}

func noID(echo.Context) (json.RawMessage, error) { return json.RawMessage(`{}`), nil }

func pathID(c echo.Context) (json.RawMessage, error) {
	return json.Marshal(map[string]string{"id": c.Param("id")})
}

// invokeAs runs ref with the input input builds from the request (no body) and answers
// status with the capability's output.
func (s *Server) invokeAs(ref string, status int, input func(echo.Context) (json.RawMessage, error)) echo.HandlerFunc {
	return func(c echo.Context) error {
		in, err := input(c)
		if err != nil {
			return err
		}
		return s.kernelCall(c, ref, in, status)
	}
}
