package gateway

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/xemahq/xema/internal/explain"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/inputschema"
	"github.com/xemahq/xema/internal/outage"
	"github.com/xemahq/xema/internal/policy"
)

// Error codes the funnel answers with (the HTTP layer maps Status, MCP maps isError).
const (
	CodeUnknownCapability = "UNKNOWN_CAPABILITY"
	CodeInvalidInput      = "INVALID_INPUT"
	CodeDenied            = "DENIED"
	CodeNoRunner          = "NO_RUNNER"
	CodePolicyUnavailable = "POLICY_UNAVAILABLE"
	CodeAuditUnavailable  = "AUDIT_UNAVAILABLE"
	// CodeInvalidOutput: the provider answered an output its capability's outputSchema refuses.
	CodeInvalidOutput = "INVALID_OUTPUT"
)

// ObligationApproval is the obligation a decision carries when a person must approve the call.
const ObligationApproval = policy.ObligationApproval

// Answers of the obligations step.
const (
	CodePendingApproval     = "PENDING_APPROVAL"
	CodeApprovalUnavailable = "APPROVAL_UNAVAILABLE"
	// CodeVersionChanged (409): an approved call was held under a biome version the org's
	// grant no longer routes it to; it did not run (RunApproved).
	CodeVersionChanged = "VERSION_CHANGED"
	// CodeTxnTokenFailed refuses, before it runs, a call whose capability declares the
	// critical-operation projection when its Txn-Token cannot be signed or carried.
	CodeTxnTokenFailed = "TXN_TOKEN_FAILED"
	// StatePendingApproval is the `status` of the 202 answer of a held call.
	StatePendingApproval = "pending-approval"
)

// Denial is the answer of a call the policy refused (403) or a limit refused (429): the
// spec's structured denial plus the common error fields. It is a result of Invoke, not an
// error: the funnel did what it is for.
type Denial struct {
	explain.Denial
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
	// Joined says an identical call of the requester was pending already: this one joined
	// it (ApprovalID is that call's) instead of waiting for a second approval.
	Joined bool `json:"joined,omitempty"`
}

// newHeld is the answer of the call audited as auditID, held as approvalID or joined to
// the identical call pending already. The message says how its requester learns the
// outcome: a client without MCP Tasks has no other way forward.
func newHeld(auditID, approvalID string, joined *Joined) *Held {
	h := &Held{Code: CodePendingApproval, Status: StatePendingApproval, AuditID: auditID, ApprovalID: approvalID}
	lead := "this call requires a human approval before it runs"
	if joined != nil {
		h.ApprovalID, h.Joined = joined.ApprovalID, true
		lead = "an identical call of yours already waits for a human approval; this call joined it (one decision, one run)"
	}
	h.Message = fmt.Sprintf("%s: approval %s. Learn its outcome with GET /v1/invocations/%s, or by retrying with the "+
		"Idempotency-Key (MCP: idempotencyKey) the call was made with; calling again without one joins it while it waits",
		lead, h.ApprovalID, h.ApprovalID)
	return h
}

// UnknownCapability answers a ref the caller's catalog has no capability for (404).
func UnknownCapability(ref string) *fault.Error {
	return fault.New(fault.NotFound, CodeUnknownCapability, "no capability %q", ref)
}

func invalidInput(v []inputschema.Violation) *fault.Error {
	v, total := capViolations(v) // the producer's list is not kept past this answer
	return &fault.Error{Kind: fault.Invalid, Code: CodeInvalidInput, ViolationCount: total,
		Message: fmt.Sprintf("input does not match the capability's schema (%d violation(s))", total), Violations: v}
}

// Unavailable answers a call refused because dep failed (fail closed); the caller reports the
// failure to the outage log.
func Unavailable(code string, dep outage.Dep) *fault.Error {
	return fault.New(fault.Unavailable, code, "%s unavailable; the call was denied (fail closed)", dep)
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

// Answer codes of a call that ran (or may have run) but whose ending is not what it asked.
const (
	// CodeOutcomeNotRecorded: the runner ran; its outcome record could not be written. The
	// outcome is spooled and written once the store is back; the decision record's auditId
	// is in the answer. Never a denial: retrying without an Idempotency-Key may run the call
	// again.
	CodeOutcomeNotRecorded = "OUTCOME_NOT_RECORDED"
	// CodeInterrupted: the gateway shut down (its --shutdown-timeout passed) while the call
	// ran; it may have reached its provider. Its outcome is recorded as interrupted.
	CodeInterrupted = "INTERRUPTED_BY_SHUTDOWN"
	// OutcomeAdmitted is the outcome of a decision record: admitted to run, the outcome
	// record (audit.OutcomeID) tells how it ended. A decision record without an outcome
	// record is a call whose ending is unknown (the gateway stopped), never one known to
	// have been dispatched.
	OutcomeAdmitted = "admitted"
	// OutcomeNotDispatched closes a decision record whose call never reached its runner.
	OutcomeNotDispatched = "not-dispatched"
)

// outcomeNotRecorded answers a call that ran when its outcome record failed.
func outcomeNotRecorded(auditID, outcome string, spooled bool) *fault.Error {
	where := "kept in memory and written once the store is back (lost if the gateway stops first)"
	if spooled {
		where = "spooled to disk and written once the store is back"
	}
	return &fault.Error{Kind: fault.Internal, Code: CodeOutcomeNotRecorded, AuditID: auditID, Outcome: outcome,
		Message: fmt.Sprintf("the call ran (its runner ended %q) but its outcome could not be recorded; the outcome is %s. "+
			"This is not a denial: retry only with the same Idempotency-Key", outcome, where)}
}

// ranUnrecorded says err answers a call that ran to its end (outcome ok) whose outcome record
// failed: its output is still the caller's.
func ranUnrecorded(err error) bool {
	var e *fault.Error
	return errors.As(err, &e) && e.Code == CodeOutcomeNotRecorded && e.Outcome == "ok"
}

func interrupted(auditID string) *fault.Error {
	return &fault.Error{Kind: fault.Unavailable, Code: CodeInterrupted, AuditID: auditID, Outcome: CodeInterrupted,
		Message: "the gateway shut down while the call ran; it may have reached its provider (its outcome is recorded as interrupted)"}
}

// MaxViolations is the most violations one answer lists; ViolationCount carries the total.
const MaxViolations = 100

// capViolations bounds the violations an answer carries; the total is returned for
// ViolationCount. The producers (schema validation, handlers) may find many more (one per
// unknown property of a 1 MiB body); the answer stays small.
func capViolations(vs []inputschema.Violation) ([]inputschema.Violation, int) {
	if len(vs) > MaxViolations {
		return vs[:MaxViolations:MaxViolations], len(vs)
	}
	return vs, len(vs)
}
