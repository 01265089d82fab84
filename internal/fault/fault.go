// Package fault holds the domain's error type: what went wrong (a Kind), a stable code, a
// message safe to show the caller, and the fields at fault. Domain packages (gateway, runners,
// catalog, grant, bindings, federation) say what kind of failure they return; the edge
// (internal/server) alone maps a kind to an HTTP status or an MCP error, once, as OPA's
// v1/server/writer does.
package fault

import (
	"errors"
	"fmt"

	"github.com/xemahq/xema/internal/inputschema"
)

// Kind is what went wrong, as the caller needs to know it.
type Kind uint8

// The kinds. Zero is Internal: an error that never said what it is must not pass for a
// client error.
const (
	Internal         Kind = iota // a bug or an unexpected state: nothing the caller can fix
	Invalid                      // the request is malformed or breaks a rule (fields named)
	Unauthenticated              // no or an invalid credential
	Denied                       // the policy refused the caller
	NotFound                     // nothing by that name the caller may see
	Conflict                     // the request contradicts the stored state
	Gone                         // it existed and never will again (an expired approval)
	TooLarge                     // a body over the limit
	UnsupportedMedia             // a body of a media type not accepted
	Unprocessable                // well-formed but not acceptable (an idempotency key reused)
	RateLimited                  // over a rate limit or quota
	NotImplemented               // the gateway cannot do this here
	Provider                     // a provider (http, connector, MCP server) failed or misbehaved
	Unavailable                  // a dependency (store, policy, capacity) is unavailable; retry
	Timeout                      // a provider did not answer in time
)

var names = [...]string{"internal", "invalid", "unauthenticated", "denied", "not-found", "conflict", "gone",
	"too-large", "unsupported-media", "unprocessable", "rate-limited", "not-implemented", "provider",
	"unavailable", "timeout"}

func (k Kind) String() string {
	if int(k) < len(names) {
		return names[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// ParseKind is the kind whose String is name; ok is false for any other name. Stored
// results name their kind, never its number, so renumbering the kinds breaks none.
func ParseKind(name string) (k Kind, ok bool) {
	for i, n := range names {
		if n == name {
			return Kind(i), true
		}
	}
	return Internal, false
}

// Error is the domain's one error type: a typed failure of the funnel, a runner, a handler or
// a domain operation, encoded as is as the answer's body. Message is safe to show the caller
// (a fixed sentence or one written for them, never an error's text); Err holds the
// underlying error for the log only.
type Error struct {
	Kind    Kind   `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// AuditID is the audit record of the call the error answers, when there is one.
	AuditID string `json:"auditId,omitempty"`
	// Violations name each bad field by JSON pointer; ViolationCount is their total when
	// Violations lists only the first of them.
	Violations     []inputschema.Violation `json:"violations,omitempty"`
	ViolationCount int                     `json:"violationCount,omitempty"`
	// RetryAfter is the seconds after which a retry may succeed (Retry-After).
	RetryAfter int `json:"retryAfter,omitempty"`
	// ProviderStatus is the HTTP status a provider answered, when there was one.
	ProviderStatus int `json:"providerStatus,omitempty"`
	// ProviderBody is the provider's own error body, passed on as its text so the caller learns
	// the provider's reason; the gateway vouches for none of it. ProviderBodyTruncated says it
	// was cut to its bound.
	ProviderBody          string `json:"providerBody,omitempty"`
	ProviderBodyTruncated bool   `json:"providerBodyTruncated,omitempty"`
	// Outcome is how a runner ended, told when the call ran but its ending is not the answer
	// (the outcome record failed, a shutdown cut it off).
	Outcome string `json:"outcome,omitempty"`
	// NotRun says nothing was done: the funnel sets it on every error it answers before it
	// dispatches the call to its runner, and a runner or handler on a refusal of its own before
	// it reaches its provider or changes anything. Its zero value, "it may have run", is the
	// safe one: an idempotency key is released for a retry only when NotRun says so.
	NotRun bool  `json:"-"`
	Err    error `json:"-"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }
func (e *Error) Unwrap() error { return e.Err }

// New is a failure of kind with a code and a message written for the caller.
func New(kind Kind, code, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Codes no one package owns: every surface answers them.
const (
	// CodeInternal answers a failure that never said what it is; its text is never shown.
	CodeInternal = "INTERNAL"
	// CodeStoreUnavailable answers a call the store could not serve (fail closed).
	CodeStoreUnavailable = "STORE_UNAVAILABLE"
	// CodeInvalidArgument answers an argument of an operation (not a capability's input) that
	// is malformed or out of range: a meta-tool's, an admin operation's, an insight window.
	CodeInvalidArgument = "INVALID_ARGUMENT"
)

// Of is err as the domain's error; anything else is the opaque internal error, whose text is
// never shown (the caller logs it).
func Of(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return New(Internal, CodeInternal, "internal error")
}

// Wrap is New keeping err, the underlying failure, for the log only.
func Wrap(err error, kind Kind, code, format string, args ...any) *Error {
	e := New(kind, code, format, args...)
	e.Err = err
	return e
}
