package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/xemahq/xema/internal/approval"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
)

// approvalRoutes are thin routes onto the approval capabilities (through the funnel, so the
// policy decides who may list and decide) and the requester's view of a held call.
func (s *Server) approvalRoutes(g *echo.Group) {
	g.GET("/approvals", s.listApprovals)
	g.GET("/approvals/:id", s.getApproval)
	g.POST("/approvals/:id/approve", s.decideApproval(approval.RefApprove))
	g.POST("/approvals/:id/reject", s.decideApproval(approval.RefReject))
	g.GET("/invocations/:id", s.invocation)
}

// approvalFilters are the query parameters of GET /v1/approvals, as approval:list@1 names them.
var approvalFilters = map[string]bool{"status": true, "biome": true, "ref": true, "requester": true, "cursor": true, "limit": true}

func (s *Server) listApprovals(c echo.Context) error {
	input := map[string]any{}
	var unknown []string
	for k, vs := range c.QueryParams() {
		switch {
		case !approvalFilters[k]:
			unknown = append(unknown, k)
		case len(vs) != 1:
			return invalidRequest("query parameter %q given %d times, want once", k, len(vs))
		case k == "limit":
			n, err := strconv.Atoi(vs[0])
			if err != nil {
				return invalidRequest("query parameter limit %q: want a whole number from 1 to 100", vs[0])
			}
			input[k] = n
		default:
			input[k] = vs[0]
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return invalidRequest("unknown query parameter(s) %s; want status, biome, ref, requester, cursor, limit", strings.Join(unknown, ", "))
	}
	raw, _ := json.Marshal(input) // strings and numbers always encode
	return s.kernelCall(c, approval.RefList, raw, http.StatusOK)
}

// getApproval is GET /v1/approvals/{id}: the one held call as the list shows it to the
// caller (approval:list@1 with its id), or 404 as for any id the caller may not see.
func (s *Server) getApproval(c echo.Context) error {
	raw, _ := json.Marshal(map[string]string{"approvalId": c.Param("id")}) // a string always encodes
	res, err := s.Gateway.Invoke(c.Request().Context(), execOf(c), gateway.Request{Ref: approval.RefList, Input: raw})
	if err != nil || res.Denial != nil || res.Held != nil {
		ans, _ := answerOf(res, err)
		return writeAnswer(c, ans)
	}
	var page approval.Page
	if err := json.Unmarshal(res.Output, &page); err != nil {
		return fmt.Errorf("decode approval:list@1 output: %w", err)
	}
	c.Response().Header().Set("X-Xema-Audit-Id", res.AuditID)
	if len(page.Approvals) == 0 {
		return fault.New(fault.NotFound, approval.CodeNotFound, "no approval %q", c.Param("id"))
	}
	return c.JSON(http.StatusOK, page.Approvals[0])
}

// decideApproval is POST /v1/approvals/{id}/approve and /reject. The body is optional for
// approve (`{}`) and `{"reason": "..."}` for reject; the capability's input schema says what
// is missing.
func (s *Server) decideApproval(ref string) echo.HandlerFunc {
	return func(c echo.Context) error {
		var body struct {
			Reason *string `json:"reason,omitempty"`
		}
		if c.Request().ContentLength != 0 {
			if err := bind(c, &body); err != nil {
				return err
			}
		}
		input := map[string]any{"approvalId": c.Param("id")}
		if body.Reason != nil {
			input["reason"] = *body.Reason
		}
		raw, _ := json.Marshal(input) // strings always encode
		return s.kernelCall(c, ref, raw, http.StatusOK)
	}
}

// kernelCall invokes a capability for the caller on a REST route and answers its output
// with status; a refusal, a hold or an error is answered as /v1/capabilities/invoke does.
func (s *Server) kernelCall(c echo.Context, ref string, input json.RawMessage, status int) error {
	res, err := s.Gateway.Invoke(c.Request().Context(), execOf(c), gateway.Request{Ref: ref, Input: input})
	if err != nil || res.Denial != nil || res.Held != nil {
		ans, _ := answerOf(res, err)
		return writeAnswer(c, ans)
	}
	c.Response().Header().Set("X-Xema-Audit-Id", res.AuditID)
	return c.JSON(status, res.Output)
}

// invocation is GET /v1/invocations/{id}: a held call's status and, once run, its output.
func (s *Server) invocation(c echo.Context) error {
	if s.Approvals == nil {
		return fault.New(fault.NotFound, approval.CodeNotFound, "no approvals on this gateway")
	}
	v, err := s.Approvals.Invocation(c.Request().Context(), execOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}
