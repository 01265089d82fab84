package server

import (
	"encoding/json"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/xemahq/xema/internal/answer"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
)

// The answer mapping is package answer's: the approval and idempotency stores keep the same
// answers the edge sends.
var (
	answerOf    = answer.Of
	errorAnswer = answer.Error
	faultOf     = fault.Of
)

// writeAnswer sends ans, with its Retry-After and replay headers. A held call's 202 says
// where its requester follows it (Location) and how often to look (Retry-After).
func writeAnswer(c echo.Context, ans answer.Answer) error {
	if ans.RetryAfter > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(ans.RetryAfter))
	}
	var h gateway.Held
	if ans.Held() && json.Unmarshal(ans.Body, &h) == nil && h.ApprovalID != "" {
		c.Response().Header().Set("Location", "/v1/invocations/"+url.PathEscape(h.ApprovalID))
		c.Response().Header().Set("Retry-After", strconv.Itoa(int(TaskPollInterval.Seconds())))
	}
	if ans.Replayed {
		c.Response().Header().Set(ReplayedHeader, "true")
	}
	return c.JSONBlob(ans.Status, ans.Body)
}
