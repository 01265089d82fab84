package identity

import (
	"errors"
	"fmt"
)

// ErrTokenInvalid is matched (errors.Is) by every rejection of a bearer token. The concrete
// error is a *TokenError whose Reason is machine-readable. No error ever holds the token.
var ErrTokenInvalid = errors.New("token invalid")

// Reasons a token is rejected.
const (
	ReasonMissingToken  = "missing_token"   // no Authorization: Bearer header
	ReasonMalformed     = "malformed"       // not a compact JWS with a JSON header and claims
	ReasonMissingKID    = "missing_kid"     // header has no kid
	ReasonAlgNotAllowed = "alg_not_allowed" // alg outside the allow-list (including none and HS*)
	ReasonUnknownKID    = "unknown_kid"     // kid not in the issuer's JWKS, even after a refresh
	ReasonBadSignature  = "bad_signature"   // signature does not verify (tampered, wrong key)
	ReasonExpired       = "expired"         // exp in the past beyond the leeway
	ReasonNotYetValid   = "not_yet_valid"   // nbf or iat in the future beyond the leeway
	ReasonMissingExp    = "missing_exp"     // no exp claim: tokens without an end are refused
	ReasonWrongIssuer   = "wrong_issuer"    // iss is not the configured issuer
	ReasonWrongAudience = "wrong_audience"  // aud does not hold the configured audience
	ReasonBadClaims     = "bad_claims"      // claims do not map to a valid Execution Context
	ReasonOutboundToken = "outbound_token"  // a token the gateway minted for a provider, replayed inbound
	ReasonTTLTooLong    = "ttl_too_long"    // exp−iat (or exp−now without iat) exceeds the maximum token lifetime
	ReasonWrongType     = "wrong_typ"       // the header's typ names another kind of JWT (a Txn-Token, an ID token's typ)
)

// TokenError is a rejected token: a reason code and a short detail written by this package
// (never a library message that might echo token content).
type TokenError struct {
	Reason string
	Detail string
}

func (e *TokenError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("%v: %s", ErrTokenInvalid, e.Reason)
	}
	return fmt.Sprintf("%v: %s: %s", ErrTokenInvalid, e.Reason, e.Detail)
}

// Is makes errors.Is(err, ErrTokenInvalid) true.
func (e *TokenError) Is(target error) bool { return target == ErrTokenInvalid }

func reject(reason, format string, args ...any) *TokenError {
	return &TokenError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Reason returns the reason code of a token rejection, or "" when err is not one.
func Reason(err error) string {
	var te *TokenError
	if errors.As(err, &te) {
		return te.Reason
	}
	return ""
}
