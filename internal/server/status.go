package server

import (
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/xemahq/xema/internal/answer"
	"github.com/xemahq/xema/internal/fault"
)

// The answer mapping is package answer's: the approval and idempotency stores keep the same
// answers the edge sends.
var (
	answerOf    = answer.Of
	errorAnswer = answer.Error
	faultOf     = fault.Of
)

// writeAnswer sends ans, with its Retry-After and replay headers.
func writeAnswer(c echo.Context, ans answer.Answer) error {
	if ans.RetryAfter > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(ans.RetryAfter))
	}
	if ans.Replayed {
		c.Response().Header().Set(ReplayedHeader, "true")
	}
	return c.JSONBlob(ans.Status, ans.Body)
}
