package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/xemahq/xema/internal/admin"
)

// adminRoutes are thin routes onto kernel capabilities: the body is the capability's input
// and the call goes through the whole funnel (authorized by the capability's humanBaseline).
func (s *Server) adminRoutes(g *echo.Group) {
	g.POST("/biomes", s.kernelRoute(admin.RefSubmit))
	g.POST("/grants", s.postGrant)
	g.POST("/lifecycle", s.kernelRoute(admin.RefLifecycle))
	g.GET("/biomes", s.lookupRoute(admin.RefBiomeList))
	g.GET("/biomes/:id/:version", s.lookupRoute(admin.RefBiomeGet))
	g.GET("/grants", s.lookupRoute(admin.RefGrantList))
	g.DELETE("/grants/:id", s.revokeGrant)
	g.POST("/grants/:id/change", s.changeGrant)
}

// revokeGrant is DELETE /v1/grants/{id}: biome:grant.revoke@1; ?dryRun=true (and
// ?since=DURATION) answers the grant and what revoking it would deny of the org's recorded
// calls, recording nothing. Both answer 200.
func (s *Server) revokeGrant(c echo.Context) error {
	input := map[string]json.RawMessage{}
	if _, err := dryRunQuery(c, input); err != nil {
		return err
	}
	input["grantId"], _ = json.Marshal(c.Param("id")) // a string always encodes
	raw, err := json.Marshal(input)
	if err != nil {
		return fmt.Errorf("encode grant revoke: %w", err)
	}
	return s.kernelCall(c, admin.RefGrantRevoke, raw, http.StatusOK)
}

// changeGrant is POST /v1/grants/{id}/change: biome:grant.change@1 with the body (profile,
// customize) as input; ?dryRun=true (and ?since=DURATION) answers 200 with the diff and the
// impact, recording nothing; otherwise 201 with the new grant.
func (s *Server) changeGrant(c echo.Context) error {
	var input map[string]json.RawMessage
	if err := bind(c, &input); err != nil {
		return err
	}
	status, err := dryRunQuery(c, input)
	if err != nil {
		return err
	}
	if _, ok := input["grantId"]; ok {
		return invalidRequest("/grantId: the grant is named by the path, not the body")
	}
	input["grantId"], _ = json.Marshal(c.Param("id")) // a string always encodes
	raw, err := json.Marshal(input)
	if err != nil {
		return fmt.Errorf("encode grant change: %w", err)
	}
	return s.kernelCall(c, admin.RefGrantChange, raw, status)
}

// postGrant is POST /v1/grants: biome:install@1 with the body as input; ?dryRun=true (and
// ?since=DURATION) answers 200 with the grant it would record and its impact, recording nothing.
func (s *Server) postGrant(c echo.Context) error {
	var input map[string]json.RawMessage
	if err := bind(c, &input); err != nil {
		return err
	}
	status, err := dryRunQuery(c, input)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(input)
	if err != nil {
		return fmt.Errorf("encode grant request: %w", err)
	}
	return s.kernelCall(c, admin.RefInstall, raw, status)
}

// dryRunQuery moves ?dryRun= and ?since= into input and answers the status of success: 200
// for a dry run, 201 for a write. Any other query parameter is refused.
func dryRunQuery(c echo.Context, input map[string]json.RawMessage) (int, error) {
	if input == nil { // a body of null
		return 0, invalidRequest("the body must be a JSON object")
	}
	status := http.StatusCreated
	for k, vs := range c.QueryParams() {
		if len(vs) != 1 {
			return 0, invalidRequest("query parameter %q given %d times, want once", k, len(vs))
		}
		switch {
		case k == "dryRun" && (vs[0] == "true" || vs[0] == "false"):
			input["dryRun"] = json.RawMessage(vs[0])
			if vs[0] == "true" {
				status = http.StatusOK
			}
		case k == "since":
			input["since"], _ = json.Marshal(vs[0]) // a string always encodes
		case k == "dryRun":
			return 0, invalidRequest("query parameter dryRun=%q: want true or false", vs[0])
		default:
			return 0, invalidRequest("unknown query parameter %q; want dryRun, since", k)
		}
	}
	return status, nil
}

// lookupRoute serves a reading capability from the path (:id, :version) and the optional
// ?biomeId= query.
func (s *Server) lookupRoute(ref string) echo.HandlerFunc {
	return func(c echo.Context) error {
		input := map[string]string{}
		for k, vs := range c.QueryParams() {
			if k != "biomeId" || len(vs) != 1 {
				return invalidRequest("query parameter %q: only biomeId, once, is accepted", k)
			}
			input[k] = vs[0]
		}
		if c.Param("id") != "" {
			id, err := pathParam(c, "id")
			if err != nil {
				return err
			}
			version, err := pathParam(c, "version")
			if err != nil {
				return err
			}
			input["biomeId"], input["version"] = id, version
		}
		raw, _ := json.Marshal(input) // a map of strings always encodes
		return s.kernelCall(c, ref, raw, http.StatusOK)
	}
}

// pathParam is a path parameter decoded: the router hands it over as the client escaped it,
// and a version such as 0.0.0+54767d633d12 arrives as 0.0.0%2B54767d633d12 from a browser.
func pathParam(c echo.Context, name string) (string, error) {
	v, err := url.PathUnescape(c.Param(name))
	if err != nil {
		return "", invalidRequest("path parameter %q: not a valid escape sequence", name)
	}
	return v, nil
}

func (s *Server) kernelRoute(ref string) echo.HandlerFunc {
	return func(c echo.Context) error {
		var input json.RawMessage
		if err := bind(c, &input); err != nil {
			return err
		}
		return s.kernelCall(c, ref, input, http.StatusCreated)
	}
}
