package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
)

// statuses is the one mapping of what went wrong (fault.Kind) to the HTTP status answered;
// MCP answers the same errors as tool results with isError and the same body.
var statuses = map[fault.Kind]int{
	fault.Internal:         http.StatusInternalServerError,
	fault.Invalid:          http.StatusBadRequest,
	fault.Unauthenticated:  http.StatusUnauthorized,
	fault.Denied:           http.StatusForbidden,
	fault.NotFound:         http.StatusNotFound,
	fault.Conflict:         http.StatusConflict,
	fault.Gone:             http.StatusGone,
	fault.TooLarge:         http.StatusRequestEntityTooLarge,
	fault.UnsupportedMedia: http.StatusUnsupportedMediaType,
	fault.Unprocessable:    http.StatusUnprocessableEntity,
	fault.RateLimited:      http.StatusTooManyRequests,
	fault.NotImplemented:   http.StatusNotImplemented,
	fault.Provider:         http.StatusBadGateway,
	fault.Unavailable:      http.StatusServiceUnavailable,
	fault.Timeout:          http.StatusGatewayTimeout,
}

// statusOf is the HTTP status of an error of kind k; a kind without one is a 500.
func statusOf(k fault.Kind) int {
	if st, ok := statuses[k]; ok {
		return st
	}
	return http.StatusInternalServerError
}

// faultOf is err as the domain's error; anything else is an internal error, whose text is
// never shown.
func faultOf(err error) *fault.Error {
	var e *fault.Error
	if errors.As(err, &e) {
		return e
	}
	return &fault.Error{Kind: fault.Internal, Code: "INTERNAL", Message: "internal error"}
}

// answerOf is the one mapping of Invoke's answer to an HTTP status and body (stored under an
// idempotency key, sent over HTTP, and answered over MCP as an isError result when not 200),
// with its code ("" for a call that ran). An error comes first: a call that ran but whose
// outcome was not recorded answers OUTCOME_NOT_RECORDED, not its output.
func answerOf(res *gateway.Result, err error) (gateway.Answer, string) {
	var (
		status, retry int
		body          any
		code          string
	)
	switch {
	case err != nil:
		e := faultOf(err)
		return errorAnswer(e), e.Code
	case res.Denial != nil:
		status, body, code = http.StatusForbidden, res.Denial, res.Denial.Code
		if res.Denial.Limited {
			status, retry = http.StatusTooManyRequests, res.Denial.RetryAfter
		}
	case res.Held != nil:
		status, body, code = http.StatusAccepted, res.Held, res.Held.Code
	default:
		status, body = http.StatusOK, res
	}
	raw, _ := json.Marshal(body) // every answer type encodes
	return gateway.Answer{Status: status, Body: raw, RetryAfter: retry}, code
}

// errorAnswer is the answer of a domain error: its kind's status, the error as the body.
func errorAnswer(e *fault.Error) gateway.Answer {
	raw, _ := json.Marshal(e)
	return gateway.Answer{Status: statusOf(e.Kind), Body: raw, RetryAfter: e.RetryAfter}
}

// writeAnswer sends ans, with its Retry-After and replay headers.
func writeAnswer(c echo.Context, ans gateway.Answer) error {
	if ans.RetryAfter > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(ans.RetryAfter))
	}
	if ans.Replayed {
		c.Response().Header().Set(ReplayedHeader, "true")
	}
	return c.JSONBlob(ans.Status, ans.Body)
}
