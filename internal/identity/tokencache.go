package identity

import (
	"crypto"
	"crypto/sha256"
	"slices"
	"time"

	"github.com/xemahq/xema/internal/bounded"
)

// Token cache defaults (Config.TokenCacheSize and Config.TokenCacheMaxAge left 0).
const (
	DefaultTokenCacheSize = 10000
	// DefaultTokenCacheMaxAge bounds how long a verified token is served from the cache even
	// when it lives longer: a key withdrawn from the issuer's JWKS stops being honoured after
	// at most this long.
	DefaultTokenCacheMaxAge = 5 * time.Minute
	// refusalTTL is how long a refusal is remembered, for refusals that only the token's
	// bytes decide (bad signature, wrong issuer, ...). Never for an unknown kid (a JWKS
	// refresh can make it known) nor a token not valid yet (it will become valid).
	refusalTTL = 5 * time.Second
)

// tokenCache remembers verification results by the SHA-256 of the raw token: the raw token
// itself is never kept. An accepted token is served until the instant the verifier would
// start refusing it (exp plus the leeway), capped at maxAge from its verification; a
// refusal for refusalTTL. Bounded by two generations of at most size/2 entries each.
type tokenCache struct {
	maxAge  time.Duration
	entries *bounded.Map[[sha256.Size]byte, tokenEntry]
}

type tokenEntry struct {
	until time.Time
	ec    ExecContext
	err   *TokenError // nil for an accepted token
	// kid and signer: the key that verified an accepted token, checked again on every hit.
	kid    string
	signer crypto.PublicKey
}

func newTokenCache(size int, maxAge time.Duration) *tokenCache {
	return &tokenCache{maxAge: maxAge, entries: bounded.New[[sha256.Size]byte, tokenEntry](size)}
}

// get returns the cached result for key; ok is false on a miss, an entry past its time, or
// an accepted token whose signing key stillSigns no longer finds in the key set.
func (c *tokenCache) get(key [sha256.Size]byte, now time.Time, stillSigns func(kid string, signer crypto.PublicKey) bool) (ExecContext, error, bool) {
	e, ok := c.entries.Get(key, func(e tokenEntry) bool { return now.Before(e.until) })
	switch {
	case !ok:
		return ExecContext{}, nil, false
	case e.err != nil:
		te := *e.err
		return ExecContext{}, &te, true
	case !stillSigns(e.kid, e.signer):
		c.entries.Delete(key)
		return ExecContext{}, nil, false
	}
	return e.ec.clone(), nil, true
}

func (c *tokenCache) accept(key [sha256.Size]byte, ec ExecContext, v verified, now time.Time) {
	until := now.Add(c.maxAge)
	if v.until.Before(until) {
		until = v.until
	}
	if !now.Before(until) || v.signer == nil {
		return
	}
	c.put(key, tokenEntry{until: until, ec: ec.clone(), kid: v.kid, signer: v.signer})
}

func (c *tokenCache) refuse(key [sha256.Size]byte, err *TokenError, now time.Time) {
	switch err.Reason {
	case ReasonUnknownKID, ReasonNotYetValid:
		return
	}
	c.put(key, tokenEntry{until: now.Add(min(refusalTTL, c.maxAge)), err: err})
}

func (c *tokenCache) put(key [sha256.Size]byte, e tokenEntry) { c.entries.Put(key, e) }

func (c *tokenCache) len() int { return c.entries.Len() }

// clone copies the slices, so no caller shares them with the cache.
func (ec ExecContext) clone() ExecContext {
	ec.Groups = cloneStrings(ec.Groups)
	ec.Roles = cloneStrings(ec.Roles)
	ec.Armed = cloneStrings(ec.Armed)
	return ec
}

func cloneStrings(s []string) []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s)
}
