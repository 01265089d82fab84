// Package runner executes an authorized, validated call: in-process (kernel handlers) or
// over HTTP to a contribution's declared invocation. Every failure is a typed *fault.Error so the
// gateway can answer and audit it without leaking provider internals: of a provider's answer
// only its status and, for an error, its own JSON or plain-text body (bounded, marked as its
// own) reach the caller.
package runner

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/xemahq/xema/internal/egress"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/kernel"
)

// Error codes of a failed run.
const (
	CodeProviderError   = "PROVIDER_ERROR"        // the provider answered non-2xx
	CodeProviderTimeout = "PROVIDER_TIMEOUT"      // no answer in time
	CodeBadResponse     = "PROVIDER_BAD_RESPONSE" // 2xx but not a JSON value
	CodeUnreachable     = "PROVIDER_UNREACHABLE"  // connection refused, DNS, TLS
	CodeNoToken         = "NO_SERVICE_TOKEN"      // outbound credentials could not be minted
	CodeHandlerFailed   = "HANDLER_FAILED"        // a kernel handler returned an error
	CodeEgressDenied    = egress.CodeDenied       // the address dialled is refused by the egress policy
	CodeRedirect        = egress.CodeRedirect     // the provider answered a 3xx, which is never followed
)

// TransportError types a failed outbound request: an egress refusal (the address actually
// dialled) and a redirect are 502s of their own; anything else is nil (the caller's own
// mapping applies). what names the destination for the message ("provider", "gitlab").
func TransportError(what string, err error) *fault.Error {
	if de, ok := egress.Denied(err); ok {
		return fault.Wrap(err, fault.Provider, CodeEgressDenied, "%s: the gateway refuses to connect to %s (%s)", what, de.Addr, de.Reason)
	}
	if egress.Redirected(err) {
		return fault.Wrap(err, fault.Provider, CodeRedirect, "%s answered a redirect; redirects are not followed", what)
	}
	return nil
}

// MessageHandlerFailed is all a caller learns of a kernel handler's untyped error.
const MessageHandlerFailed = "the capability's handler failed; the operator's log has the detail under this call's auditId"

type decidedKey struct{}

// WithDecided carries what a call's decision read of the connection the call goes through
// (opaque here: gateway.Connections gives it, internal/federation's runner takes it back) to
// the call's run, so that the run does not read it again.
func WithDecided(ctx context.Context, read any) context.Context {
	return context.WithValue(ctx, decidedKey{}, read)
}

// Decided is what WithDecided carried to the call running in ctx; nil when nothing.
func Decided(ctx context.Context) any { return ctx.Value(decidedKey{}) }

// Runner runs one call.
type Runner interface {
	Kind() string
	Run(ctx context.Context, call kernel.Call) (json.RawMessage, error)
}

// Kernel runs an in-process handler.
type Kernel struct{ Handler kernel.Handler }

// Kind is "kernel".
func (Kernel) Kind() string { return "kernel" }

// Run calls the handler and marshals its result.
func (k Kernel) Run(ctx context.Context, call kernel.Call) (json.RawMessage, error) {
	out, err := k.Handler(ctx, call)
	if err != nil {
		var re *fault.Error
		if errors.As(err, &re) {
			return nil, re
		}
		// The Go error may name files, addresses or store internals: it is kept in Err for the
		// log (the gateway logs it with the auditId), never shown to the caller.
		return nil, &fault.Error{Code: CodeHandlerFailed, Message: MessageHandlerFailed, Err: err}
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, fault.Wrap(err, fault.Internal, CodeHandlerFailed, "handler output is not JSON")
	}
	return raw, nil
}
