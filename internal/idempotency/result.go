package idempotency

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
)

// The kinds of a result: what the funnel's Invoke returned.
const (
	kindRan    = "ran"    // a gateway.Result that ran: output, auditId, obligations
	kindDenied = "denied" // a gateway.Denial (by the policy, or by a limit)
	kindHeld   = "held"   // a gateway.Held, waiting for a person's approval
	kindError  = "error"  // a *fault.Error
)

// errUnreadable is a stored result this release cannot take for one the funnel returned.
var errUnreadable = errors.New("stored idempotency result unreadable")

// result is the first call's outcome as a key keeps it: what the funnel returned, in the
// domain's terms. It names no HTTP status: a replay's answer is made of it by answer.Of, as
// the first call's was, so the stored form follows the domain, not the edge's encoding.
// Exactly one of Ran, Denial, Held and Error is set, the one Kind names.
type result struct {
	Kind   string          `json:"kind"`
	Ran    *gateway.Result `json:"ran,omitempty"`
	Denial *gateway.Denial `json:"denial,omitempty"`
	// Limited is Denial.Limited (a limit refused the call, not a grant), which its JSON omits.
	Limited bool          `json:"limited,omitempty"`
	Held    *gateway.Held `json:"held,omitempty"`
	Error   *fault.Error  `json:"error,omitempty"`
	// Fault names Error's kind (fault.Kind.String), which its JSON omits.
	Fault string `json:"fault,omitempty"`
}

// resultOf is the result of what the funnel's Invoke returned: an error comes first, as in
// answer.Of (a call that ran but whose outcome was not recorded answers the error).
func resultOf(res *gateway.Result, err error) result {
	switch {
	case err != nil:
		e := *fault.Of(err)
		e.Err = nil // never answered, so never kept
		return result{Kind: kindError, Error: &e, Fault: e.Kind.String()}
	case res.Denial != nil:
		return result{Kind: kindDenied, Denial: res.Denial, Limited: res.Denial.Limited}
	case res.Held != nil:
		return result{Kind: kindHeld, Held: res.Held}
	}
	return result{Kind: kindRan, Ran: &gateway.Result{Output: res.Output, AuditID: res.AuditID, Obligations: res.Obligations}}
}

// parseResult decodes a stored result. Anything but a result of a known kind carrying its
// one value (and the audit record every call that was decided has) is an error wrapping
// errUnreadable: a replay never makes an answer of a guess.
func parseResult(raw []byte) (result, error) {
	var r result
	if err := json.Unmarshal(raw, &r); err != nil {
		return result{}, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	values := 0
	for _, set := range []bool{r.Ran != nil, r.Denial != nil, r.Held != nil, r.Error != nil} {
		if set {
			values++
		}
	}
	ok := values == 1 && (r.Kind == kindDenied || !r.Limited) && (r.Kind == kindError || r.Fault == "")
	switch r.Kind {
	case kindRan:
		ok = ok && r.Ran != nil && r.Ran.AuditID != ""
	case kindDenied:
		ok = ok && r.Denial != nil && r.Denial.AuditID != ""
		if ok {
			r.Denial.Limited = r.Limited
		}
	case kindHeld:
		ok = ok && r.Held != nil && r.Held.AuditID != ""
	case kindError:
		var known bool
		if r.Error != nil {
			r.Error.Kind, known = fault.ParseKind(r.Fault)
		}
		ok = ok && known
	default:
		return result{}, fmt.Errorf("%w: unknown kind %q", errUnreadable, r.Kind)
	}
	if !ok {
		return result{}, fmt.Errorf("%w: a %s result without its value, or with another's", errUnreadable, r.Kind)
	}
	return r, nil
}

// outcome is what the funnel returned, as answer.Of takes it.
func (r result) outcome() (*gateway.Result, error) {
	switch r.Kind {
	case kindDenied:
		return &gateway.Result{AuditID: r.Denial.AuditID, Denial: r.Denial}, nil
	case kindHeld:
		return &gateway.Result{AuditID: r.Held.AuditID, Held: r.Held}, nil
	case kindError:
		return nil, r.Error
	}
	return r.Ran, nil
}

// auditID is the audit record of the call the result answers ("" for an error with none).
func (r result) auditID() string {
	switch r.Kind {
	case kindDenied:
		return r.Denial.AuditID
	case kindHeld:
		return r.Held.AuditID
	case kindError:
		return r.Error.AuditID
	}
	return r.Ran.AuditID
}
