package grant

import (
	"errors"
	"net/http"
	"strings"
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

// Status is the HTTP status the error answers with: 409 for a conflict, otherwise 400.
// An unknown name inside the request body is a 400 like any other bad field (the issue's
// "Bad input": each is a 400 or 409), not a 404: the URL addressed exists.
func (e *FieldError) Status() int {
	if errors.Is(e.Err, ErrConflict) {
		return http.StatusConflict
	}
	return http.StatusBadRequest
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

// Status is the most severe status among the errors.
func (es Errors) Status() int {
	status := http.StatusBadRequest
	for _, e := range es {
		status = max(status, e.Status())
	}
	return status
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
