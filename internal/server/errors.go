package server

import (
	"net/http"

	"github.com/xemahq/xema/internal/answer"
	"github.com/xemahq/xema/internal/fault"
)

// Answer codes of the HTTP and MCP surfaces themselves (a request the edge refuses before any
// domain code sees it).
const (
	CodeInvalidRequest       = "INVALID_REQUEST"
	CodeMalformedJSON        = "MALFORMED_JSON"
	CodeMalformedArguments   = "MALFORMED_ARGUMENTS"
	CodeBadRequest           = "BAD_REQUEST"
	CodeBodyTooLarge         = "BODY_TOO_LARGE"
	CodeUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"
	CodeRequestTimeout       = "REQUEST_TIMEOUT"
	CodeMethodNotAllowed     = "METHOD_NOT_ALLOWED"
	CodeNotReady             = "NOT_READY"
	CodeUnknownAuditID       = "UNKNOWN_AUDIT_ID"
	CodeNotADenial           = "NOT_A_DENIAL"
)

// invalidRequest is a request that breaks a rule of the surface (400), the message naming it.
func invalidRequest(format string, args ...any) *fault.Error {
	return fault.New(fault.Invalid, CodeInvalidRequest, format, args...)
}

// auditUnavailable answers a read of the audit log the store could not serve.
func auditUnavailable() *fault.Error {
	return fault.New(fault.Unavailable, fault.CodeStoreUnavailable, "audit log unavailable")
}

// sendAnswer writes ans on a plain handler (before Echo's routing, or beside it).
func sendAnswer(w http.ResponseWriter, ans answer.Answer) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ans.Status)
	_, _ = w.Write(ans.Body)
}
