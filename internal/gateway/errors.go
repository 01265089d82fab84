package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/inputschema"
)

// Error codes the funnel answers with (the HTTP layer maps Status, MCP maps isError).
const (
	CodeUnauthenticated   = "UNAUTHENTICATED"
	CodeUnknownCapability = "UNKNOWN_CAPABILITY"
	CodeInvalidInput      = "INVALID_INPUT"
	CodeDenied            = "DENIED"
	CodeRateLimited       = "RATE_LIMITED"
	CodeNoRunner          = "NO_RUNNER"
	CodePolicyUnavailable = "POLICY_UNAVAILABLE"
	CodeAuditUnavailable  = "AUDIT_UNAVAILABLE"
	CodeStoreUnavailable  = "STORE_UNAVAILABLE"
	// CodeInvalidOutput: the provider answered an output its capability's outputSchema refuses.
	CodeInvalidOutput = "INVALID_OUTPUT"
)

// Error is a typed answer of the funnel: never a stack trace, never a provider secret.
type Error struct {
	Status     int                     `json:"-"`
	Code       string                  `json:"code"`
	Message    string                  `json:"message"`
	AuditID    string                  `json:"auditId,omitempty"`
	Violations []inputschema.Violation `json:"violations,omitempty"`
	// ViolationCount is the total number of violations found; Violations lists at most
	// MaxViolations of them (Body caps it).
	ViolationCount int `json:"violationCount,omitempty"`
	RetryAfter     int `json:"retryAfter,omitempty"`
	// State and ApprovalID answer a call held for approval (202): status "pending-approval".
	State      string `json:"status,omitempty"`
	ApprovalID string `json:"approvalId,omitempty"`
	// Denial is the structured denial body answered as is for a policy denial.
	Denial *audit.Denial `json:"-"`
	// ProviderStatus is the upstream HTTP status of a provider failure, when known.
	ProviderStatus int `json:"providerStatus,omitempty"`
	// Outcome is how the runner ended, answered when the call ran but its ending is not the
	// answer (OUTCOME_NOT_RECORDED, INTERRUPTED_BY_SHUTDOWN).
	Outcome string `json:"outcome,omitempty"`
	// output is the runner's output of a call that ran but whose outcome is not recorded.
	output json.RawMessage
}

// RanOutput is the output of a call that ran while its outcome record failed (nil otherwise).
func (e *Error) RanOutput() json.RawMessage { return e.output }

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Body is what the HTTP layer writes for e.
func (e *Error) Body() any {
	if e.Denial != nil {
		return denialBody{Denial: *e.Denial, Code: e.Code, Message: e.Message, RetryAfter: e.RetryAfter}
	}
	if len(e.Violations) > 0 {
		capped := *e
		var total int
		capped.Violations, total = capViolations(e.Violations)
		capped.ViolationCount = max(total, e.ViolationCount) // a producer may have capped already
		return &capped
	}
	return e
}

// denialBody is the spec's structured denial plus the common error fields.
type denialBody struct {
	audit.Denial
	Code       string `json:"code"`
	Message    string `json:"message"`
	RetryAfter int    `json:"retryAfter,omitempty"`
}

func unknownCapability(ref string) *Error {
	return &Error{Status: http.StatusNotFound, Code: CodeUnknownCapability,
		Message: fmt.Sprintf("no capability %q", ref)}
}

func invalidInput(v []inputschema.Violation) *Error {
	v, total := capViolations(v) // the producer's list is not kept past this answer
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, ViolationCount: total,
		Message: fmt.Sprintf("input does not match the capability's schema (%d violation(s))", total), Violations: v}
}

func unavailable(code, what string, err error) *Error {
	deps.fail(what, err)
	return &Error{Status: http.StatusServiceUnavailable, Code: code,
		Message: fmt.Sprintf("%s unavailable; the call was denied (fail closed)", what)}
}

func reasonsJSON(v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil || string(raw) == "null" {
		return json.RawMessage("[]")
	}
	return raw
}

// outputError carries an INVALID_OUTPUT answer through the run step's error path, so it is
// logged and audited as the call's outcome like any other provider failure.
type outputError struct{ answer *Error }

func (e *outputError) Error() string { return e.answer.Error() }

// invalidOutput is the 502 of an output that does not match the capability's outputSchema:
// the message names the first JSON path (into the output), the violations list them all.
func invalidOutput(ref string, v []inputschema.Violation) error {
	v, total := capViolations(v)
	at := v[0].Path
	if at == "" {
		at = "/"
	}
	return &outputError{answer: &Error{Status: http.StatusBadGateway, Code: CodeInvalidOutput, ViolationCount: total, Violations: v,
		Message: fmt.Sprintf("the provider of %s answered an output that does not match its outputSchema at %s: %s (%d violation(s)); the output was not passed on",
			ref, at, v[0].Message, total)}}
}
