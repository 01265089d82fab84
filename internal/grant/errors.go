package grant

import (
	"errors"
	"strings"

	"github.com/xemahq/xema/internal/fault"
)

// Sentinels every FieldError wraps, so callers can branch with errors.Is.
var (
	// ErrInvalid: the value is malformed (type, range, syntax).
	ErrInvalid = errors.New("invalid")
	// ErrUnknown: the value names something that does not exist (biome version, capability,
	// environment, profile).
	ErrUnknown = errors.New("unknown")
	// ErrConflict: the request contradicts stored state (a stale digest hash).
	ErrConflict = errors.New("conflict")
)

// Machine-readable codes of FieldError.
const (
	CodeInvalidJSON         = "INVALID_JSON"
	CodeUnknownField        = "UNKNOWN_FIELD"
	CodeMissingField        = "MISSING_FIELD"
	CodeInvalidType         = "INVALID_TYPE"
	CodeInvalidValue        = "INVALID_VALUE"
	CodeUnknownBiomeVersion = "UNKNOWN_BIOME_VERSION"
	CodeStaleDigest         = "STALE_DIGEST"
	CodeUnknownProfile      = "UNKNOWN_PROFILE"
	CodeUnknownCapability   = "UNKNOWN_CAPABILITY"
	CodeUnknownEnvironment  = "UNKNOWN_ENVIRONMENT"
	CodeInvalidGlob         = "INVALID_GLOB"
	CodeInvalidSubject      = "INVALID_SUBJECT"
	CodeInvalidLimit        = "INVALID_LIMIT"
	CodeInvalidDuration     = "INVALID_DURATION"
)

// FieldError is one bad field of a grant request, located by its JSON pointer (RFC 6901).
type FieldError struct {
	Path    string // JSON pointer, "" for the whole document
	Code    string
	Message string
	Err     error // ErrInvalid, ErrUnknown or ErrConflict
}

func (e *FieldError) Error() string {
	path := e.Path
	if path == "" {
		path = "/"
	}
	return path + ": " + e.Message
}

func (e *FieldError) Unwrap() error { return e.Err }

// Kind is what the error is: a conflict, otherwise invalid. An unknown name inside the request
// body is invalid like any other bad field, not "not found": the URL addressed exists.
func (e *FieldError) Kind() fault.Kind {
	if errors.Is(e.Err, ErrConflict) {
		return fault.Conflict
	}
	return fault.Invalid
}

// Errors is every bad field found in one request, members in key order.
type Errors []*FieldError

func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap lets errors.Is and errors.As see each FieldError.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Kind is a conflict when any error is one, otherwise invalid.
func (es Errors) Kind() fault.Kind {
	for _, e := range es {
		if e.Kind() == fault.Conflict {
			return fault.Conflict
		}
	}
	return fault.Invalid
}

// err returns es as an error, or nil when empty (a nil Errors in an error is not nil).
func (es Errors) err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

func invalid(path, code, msg string) *FieldError {
	return &FieldError{Path: path, Code: code, Message: msg, Err: ErrInvalid}
}

func unknown(path, code, msg string) *FieldError {
	return &FieldError{Path: path, Code: code, Message: msg, Err: ErrUnknown}
}
