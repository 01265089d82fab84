package server

import (
	"encoding/json"
	"errors"
	"net/http"

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
	fault.Pending:          http.StatusAccepted,
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

// answerOf encodes Invoke's result as the HTTP answer (stored under an idempotency key and
// sent), with the error code ("" for 200).
func answerOf(res *gateway.Result, err error) (gateway.Answer, string) {
	if err == nil {
		raw, _ := json.Marshal(res) // a Result always encodes
		return gateway.Answer{Status: http.StatusOK, Body: raw}, ""
	}
	var ge *gateway.Error
	if !errors.As(err, &ge) {
		ge = &gateway.Error{Kind: fault.Internal, Code: "INTERNAL", Message: "internal error"}
	}
	raw, _ := json.Marshal(ge.Body())
	return gateway.Answer{Status: statusOf(ge.Kind), Body: raw}, ge.Code
}
