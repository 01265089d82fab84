package gateway

import (
	"encoding/json"
	"fmt"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/fault"
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

// Denial is the answer of a call the policy refused (403) or a limit refused (429): the
// spec's structured denial plus the common error fields. It is a result of Invoke, not an
// error: the funnel did what it is for.
type Denial struct {
	audit.Denial
	Code       string `json:"code"`
	Message    string `json:"message"`
	RetryAfter int    `json:"retryAfter,omitempty"`
	// Limited says a rate limit or quota refused the call, not a grant (429, not 403).
	Limited bool `json:"-"`
}

// Held is the answer of a call held for a person's approval (202 "pending-approval").
type Held struct {
	Code       string `json:"code"`
	Message    string `json:"message"`
	AuditID    string `json:"auditId"`
	Status     string `json:"status"`
	ApprovalID string `json:"approvalId"`
}

func unknownCapability(ref string) *fault.Error {
	return &fault.Error{Kind: fault.NotFound, Code: CodeUnknownCapability,
		Message: fmt.Sprintf("no capability %q", ref)}
}

func invalidInput(v []inputschema.Violation) *fault.Error {
	v, total := capViolations(v) // the producer's list is not kept past this answer
	return &fault.Error{Kind: fault.Invalid, Code: CodeInvalidInput, ViolationCount: total,
		Message: fmt.Sprintf("input does not match the capability's schema (%d violation(s))", total), Violations: v}
}

func unavailable(code, what string, err error) *fault.Error {
	deps.fail(what, err)
	return &fault.Error{Kind: fault.Unavailable, Code: code,
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
type outputError struct{ answer *fault.Error }

func (e *outputError) Error() string { return e.answer.Error() }

// invalidOutput is the 502 of an output that does not match the capability's outputSchema:
// the message names the first JSON path (into the output), the violations list them all.
func invalidOutput(ref string, v []inputschema.Violation) error {
	v, total := capViolations(v)
	at := v[0].Path
	if at == "" {
		at = "/"
	}
	return &outputError{answer: &fault.Error{Kind: fault.Provider, Code: CodeInvalidOutput, ViolationCount: total, Violations: v,
		Message: fmt.Sprintf("the provider of %s answered an output that does not match its outputSchema at %s: %s (%d violation(s)); the output was not passed on",
			ref, at, v[0].Message, total)}}
}
