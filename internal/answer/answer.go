// Package answer is the one mapping of what the gateway did to the answer a caller gets: an
// HTTP status and a JSON body. The HTTP API sends it, MCP answers it as a tool result (isError
// when not 200), the approval store keeps it, and the idempotency layer makes it again of the
// result it keeps, so a retried call and a held call's task return exactly what the
// synchronous call answered.
package answer

import (
	"encoding/json"
	"net/http"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
)

// Answer is an invocation's answer as sent: status and JSON body. MCP sends the same body,
// as an isError tool result unless the call ran.
type Answer struct {
	Status int
	Body   json.RawMessage
	// Replayed is true when the answer is the stored one of an earlier call.
	Replayed bool
	// RetryAfter is the Retry-After seconds of a refusal a retry may pass; a replayed answer
	// has none (such answers are not run, so their key is released, and a stored one's
	// moment has passed).
	RetryAfter int
}

// Ran says the call ran: the body is its {output, auditId, obligations}.
func (a Answer) Ran() bool { return a.Status == http.StatusOK }

// Held says the call waits for a person's approval: the body is its gateway.Held.
func (a Answer) Held() bool { return a.Status == http.StatusAccepted }

// statuses maps what went wrong (fault.Kind) to the HTTP status answered.
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

// Status is the HTTP status of an error of kind k; a kind without one is a 500.
func Status(k fault.Kind) int {
	if st, ok := statuses[k]; ok {
		return st
	}
	return http.StatusInternalServerError
}

// Of is Invoke's answer, with its code ("" for a call that ran). An error comes first: a
// call that ran but whose outcome was not recorded answers OUTCOME_NOT_RECORDED, not its
// output.
func Of(res *gateway.Result, err error) (Answer, string) {
	var (
		status, retry int
		body          any
		code          string
	)
	switch {
	case err != nil:
		e := fault.Of(err)
		return Error(e), e.Code
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
	return Answer{Status: status, Body: raw, RetryAfter: retry}, code
}

// Error is the answer of a domain error: its kind's status, the error as the body.
func Error(e *fault.Error) Answer {
	raw, _ := json.Marshal(e)
	return Answer{Status: Status(e.Kind), Body: raw, RetryAfter: e.RetryAfter}
}
