package identity

import (
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// Leeway bounds: clocks drift a little, tokens must not live much past their exp.
const (
	DefaultLeeway = 30 * time.Second
	MaxLeeway     = 2 * time.Minute
	// DefaultMaxTokenTTL is the longest lifetime of a token accepted when Config.MaxTokenTTL
	// is 0: a stolen long-lived token would otherwise stay good for years.
	DefaultMaxTokenTTL = 24 * time.Hour
)

// asymmetricAlgs are the only algorithms a verifier may allow: a shared-secret (HS*) or
// unsigned (none) token can be forged by anyone holding the public JWKS.
var asymmetricAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// Config configures a Verifier.
type Config struct {
	// Issuer and Audience are required; iss must equal Issuer and aud must hold Audience.
	Issuer   string
	Audience string
	// JWKSURL is where the issuer publishes its keys. Exactly one of JWKSURL and LocalJWKS.
	JWKSURL string
	// LocalJWKS is a JWK Set held in memory (the development issuer's).
	LocalJWKS json.RawMessage
	// Algorithms allowed in the token header; required, asymmetric ones only.
	Algorithms []string
	// Leeway for exp, nbf and iat; 0 means DefaultLeeway, at most MaxLeeway.
	Leeway time.Duration
	// MaxTokenTTL refuses a token whose exp−iat (exp−now when it has no iat) exceeds it;
	// 0 means DefaultMaxTokenTTL.
	MaxTokenTTL time.Duration
	// Mapping turns claims into the Execution Context; nil means DevIssuerMapping.
	Mapping *ClaimMapping
	// RefreshInterval is how often the JWKS is fetched again (default 1h).
	RefreshInterval time.Duration
	// UnknownKIDRefreshEvery rate-limits the refresh an unknown kid triggers (default 1m).
	UnknownKIDRefreshEvery time.Duration
	// HTTPClient fetches the JWKS (default: a client with a 10s timeout).
	HTTPClient *http.Client
	// RefusedClients are OAuth client ids (azp / client_id claims) whose tokens are never
	// accepted: the gateway's own outbound client, whose tokens providers receive.
	RefusedClients []string
	// TokenCacheSize bounds the cache of verification results (entries, keyed by the
	// SHA-256 of the raw token): 0 means DefaultTokenCacheSize, negative turns it off.
	TokenCacheSize int
	// TokenCacheMaxAge caps how long one verification is reused; 0 means
	// DefaultTokenCacheMaxAge.
	TokenCacheMaxAge time.Duration
}

// Verifier checks bearer tokens and maps their claims to an Execution Context. It is safe for
// concurrent use.
type Verifier struct {
	issuer   string
	audience string
	algs     []string
	keys     keyfunc.Keyfunc
	parser   *jwt.Parser
	mapping  ClaimMapping
	refused  []string
	maxTTL   time.Duration
	leeway   time.Duration
	cache    *tokenCache // nil when off
}

// NewVerifier builds a verifier. With JWKSURL it fetches the JWKS before returning: a JWKS
// that cannot be fetched, or holds no usable key, is an error (never a verifier that rejects
// everything later). ctx bounds that first fetch and the lifetime of the background refresh.
func NewVerifier(ctx context.Context, cfg Config) (*Verifier, error) {
	if cfg.Issuer == "" || cfg.Audience == "" {
		return nil, errors.New("identity verifier: issuer and audience are required")
	}
	if len(cfg.Algorithms) == 0 {
		return nil, errors.New("identity verifier: an algorithm allow-list is required")
	}
	for _, a := range cfg.Algorithms {
		if !slices.Contains(asymmetricAlgs, a) {
			return nil, fmt.Errorf("identity verifier: algorithm %q not allowed (asymmetric only: %v)", a, asymmetricAlgs)
		}
	}
	leeway := cfg.Leeway
	switch {
	case leeway == 0:
		leeway = DefaultLeeway
	case leeway < 0 || leeway > MaxLeeway:
		return nil, fmt.Errorf("identity verifier: leeway %v out of range (0, %v]", leeway, MaxLeeway)
	}
	maxTTL := cfg.MaxTokenTTL
	switch {
	case maxTTL == 0:
		maxTTL = DefaultMaxTokenTTL
	case maxTTL < 0:
		return nil, fmt.Errorf("identity verifier: max token TTL %v must be positive", maxTTL)
	}
	mapping := DevIssuerMapping()
	if cfg.Mapping != nil {
		mapping = *cfg.Mapping
	}
	if err := mapping.Validate(); err != nil {
		return nil, fmt.Errorf("identity verifier: %w", err)
	}
	var (
		keys keyfunc.Keyfunc
		err  error
	)
	switch {
	case cfg.JWKSURL != "" && cfg.LocalJWKS != nil:
		return nil, errors.New("identity verifier: set JWKSURL or LocalJWKS, not both")
	case cfg.JWKSURL != "":
		keys, err = remoteKeys(ctx, cfg)
	case cfg.LocalJWKS != nil:
		keys, err = keyfunc.NewJWKSetJSON(cfg.LocalJWKS)
	default:
		return nil, errors.New("identity verifier: JWKSURL or LocalJWKS is required")
	}
	if err != nil {
		return nil, fmt.Errorf("identity verifier: JWKS: %w", err)
	}
	all, err := keys.Storage().KeyReadAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("identity verifier: JWKS: %w", err)
	}
	if len(all) == 0 {
		return nil, errors.New("identity verifier: the JWKS holds no usable key")
	}
	var cache *tokenCache
	if cfg.TokenCacheSize >= 0 {
		maxAge := cfg.TokenCacheMaxAge
		if maxAge <= 0 {
			maxAge = DefaultTokenCacheMaxAge
		}
		size := cfg.TokenCacheSize
		if size == 0 {
			size = DefaultTokenCacheSize
		}
		cache = newTokenCache(size, maxAge)
	}
	return &Verifier{
		cache:    cache,
		leeway:   leeway,
		issuer:   cfg.Issuer,
		audience: cfg.Audience,
		algs:     slices.Clone(cfg.Algorithms),
		keys:     keys,
		mapping:  mapping,
		refused:  slices.Clone(cfg.RefusedClients),
		maxTTL:   maxTTL,
		// The alg allow-list is enforced in keyfunc (before any signature check) rather than
		// by jwt.WithValidMethods, so a refused alg gets its own reason code.
		parser: jwt.NewParser(
			jwt.WithIssuer(cfg.Issuer),
			jwt.WithAudience(cfg.Audience),
			jwt.WithLeeway(leeway),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
		),
	}, nil
}

func remoteKeys(ctx context.Context, cfg Config) (keyfunc.Keyfunc, error) {
	refresh := cfg.RefreshInterval
	if refresh <= 0 {
		refresh = time.Hour
	}
	unknownEvery := cfg.UnknownKIDRefreshEvery
	if unknownEvery <= 0 {
		unknownEvery = time.Minute
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	failFirst := false
	const fetchTimeout = 10 * time.Second
	return keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKSURL}, keyfunc.Override{
		Client:                    client,
		HTTPTimeout:               fetchTimeout,
		NoErrorReturnFirstHTTPReq: &failFirst,
		RefreshInterval:           refresh,
		RefreshUnknownKID:         rate.NewLimiter(rate.Every(unknownEvery), 1),
		// jwkset bounds the limiter's wait and the unknown-kid refresh's HTTP request with
		// the same context, so this is also the refresh's timeout (at 1 ms every refresh
		// across a network failed, and rotated-in keys were refused for up to an hour). A
		// request waits only when the limiter's next token is due within it: one request per
		// window at most, for at most fetchTimeout; the others fail at once as unknown_kid.
		RateLimitWaitMax: fetchTimeout,
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(ctx context.Context, err error) {
				slog.WarnContext(ctx, "JWKS refresh failed; keeping the previous keys", "url", u, "error", err)
			}
		},
	})
}

// Authenticate verifies the request's "Authorization: Bearer" token.
func (v *Verifier) Authenticate(r *http.Request) (ExecContext, error) {
	tok, err := BearerToken(r)
	if err != nil {
		return ExecContext{}, err
	}
	return v.Verify(r.Context(), tok)
}

// BearerToken is the request's "Authorization: Bearer" token.
func BearerToken(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", reject(ReasonMissingToken, "no Authorization header")
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", reject(ReasonMissingToken, "Authorization header is not \"Bearer <token>\"")
	}
	return strings.TrimSpace(tok), nil
}

// Verify checks the token (signature, kid, alg, iss, aud, exp, nbf, iat) and maps its claims.
// Every failure is a *TokenError (errors.Is ErrTokenInvalid) that never contains the token.
//
// A verified token is served from a bounded cache, keyed by the SHA-256 of raw, until the
// instant verification would refuse it (exp plus the leeway) and at most TokenCacheMaxAge;
// a refusal that only the token's bytes decide is remembered for a few seconds.
func (v *Verifier) Verify(ctx context.Context, raw string) (ExecContext, error) {
	now := time.Now()
	if v.cache == nil {
		ec, _, err := v.verify(ctx, raw, now)
		return ec, err
	}
	key := sha256.Sum256([]byte(raw))
	if ec, err, ok := v.cache.get(key, now, v.stillSigns(ctx)); ok {
		return ec, err
	}
	ec, until, err := v.verify(ctx, raw, now)
	if err != nil {
		if te, ok := err.(*TokenError); ok {
			v.cache.refuse(key, te, now)
		}
		return ExecContext{}, err
	}
	v.cache.accept(key, ec, until, now)
	return ec, nil
}

// stillSigns reports whether kid still names signer in the issuer's key set, so a cached
// token stops being accepted as soon as its key is withdrawn or replaced (as an uncached
// verification would refuse it: unknown_kid or bad_signature).
func (v *Verifier) stillSigns(ctx context.Context) func(kid string, signer crypto.PublicKey) bool {
	return func(kid string, signer crypto.PublicKey) bool {
		jwk, err := v.keys.Storage().KeyRead(ctx, kid)
		if err != nil {
			return false
		}
		pub, ok := publicKey(jwk.Key()).(interface{ Equal(crypto.PublicKey) bool })
		return ok && pub.Equal(signer)
	}
}

func publicKey(key any) any {
	if pk, ok := key.(interface{ Public() crypto.PublicKey }); ok {
		return pk.Public()
	}
	return key
}

// verified says what an accepted token's cache entry depends on.
type verified struct {
	until  time.Time // when verification would start refusing the token (exp + leeway)
	kid    string
	signer crypto.PublicKey
}

// verify is Verify without the cache.
func (v *Verifier) verify(ctx context.Context, raw string, now time.Time) (ec ExecContext, until verified, err error) {
	claims := jwt.MapClaims{}
	var signer crypto.PublicKey
	kf := v.keyfunc(ctx)
	tok, err := v.parser.ParseWithClaims(raw, claims, func(t *jwt.Token) (any, error) {
		k, err := kf(t)
		signer = k
		return k, err
	})
	if err != nil {
		return ExecContext{}, until, classify(err, claims)
	}
	if use, ok := claims[ClaimUse]; ok {
		return ExecContext{}, until, reject(ReasonOutboundToken, "a token the gateway sends to providers (%s %v) is never accepted inbound", ClaimUse, truncate(fmt.Sprint(use), 20))
	}
	for _, c := range []string{"azp", "client_id"} {
		if id, _ := claims[c].(string); id != "" && slices.Contains(v.refused, id) {
			return ExecContext{}, until, reject(ReasonOutboundToken, "a token of the gateway's own outbound client is never accepted inbound")
		}
	}
	if err := v.checkLifetime(claims, now); err != nil {
		return ExecContext{}, until, err
	}
	ec, err = v.mapping.Map(claims)
	if err != nil {
		return ExecContext{}, until, reject(ReasonBadClaims, "%v", err)
	}
	exp, _ := claims.GetExpirationTime() // required and type-checked by the parser
	kid, _ := tok.Header[jwkset.HeaderKID].(string)
	return ec, verified{until: exp.Add(v.leeway), kid: kid, signer: signer}, nil
}

// checkLifetime refuses a token meant to live longer than the maximum: exp−iat, or exp−now
// for a token without iat (its remaining life is all that can be measured). The parser has
// already required exp and checked both claims' types.
func (v *Verifier) checkLifetime(claims jwt.MapClaims, now time.Time) error {
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		return reject(ReasonMissingExp, "the token has no exp")
	}
	from := now
	if iat, err := claims.GetIssuedAt(); err == nil && iat != nil {
		from = iat.Time
	}
	if life := exp.Sub(from); life > v.maxTTL {
		return reject(ReasonTTLTooLong, "the token's lifetime %s exceeds the maximum %s", life.Round(time.Second), v.maxTTL)
	}
	return nil
}

// keyfunc requires a kid and an allowed alg before looking the key up, so a token without a
// kid is never tried against every key of the set, and a key published for one alg is never
// used with another.
func (v *Verifier) keyfunc(ctx context.Context) jwt.Keyfunc {
	return func(t *jwt.Token) (any, error) {
		alg, _ := t.Header["alg"].(string)
		if !slices.Contains(v.algs, alg) {
			return nil, reject(ReasonAlgNotAllowed, "alg %q is not in the allow-list %v", truncate(alg, 20), v.algs)
		}
		if typ, ok := t.Header["typ"]; ok && !accessTokenType(typ) {
			// A JWT of another kind (a Txn-Token the gateway signs for a provider, a
			// logout token) is never a bearer token here, whoever signed it.
			return nil, reject(ReasonWrongType, "typ %q is not an access token's (JWT or at+jwt)", truncate(fmt.Sprint(typ), 30))
		}
		if _, ok := t.Header["crit"]; ok {
			// RFC 7515 §4.1.11: a recipient must refuse a token whose crit names an extension
			// it does not understand; the gateway understands none.
			return nil, reject(ReasonMalformed, "the token header's crit names extensions the gateway does not understand")
		}
		kid, _ := t.Header[jwkset.HeaderKID].(string)
		if kid == "" {
			return nil, reject(ReasonMissingKID, "the token header has no kid")
		}
		// The storage refreshes from the JWKS URL on a miss when its rate limiter allows; any
		// failure here (not found, refresh refused or failed) means the kid is not known.
		jwk, err := v.keys.Storage().KeyRead(ctx, kid)
		if err != nil {
			return nil, reject(ReasonUnknownKID, "kid %q is not in the issuer's key set", truncate(kid, 64))
		}
		m := jwk.Marshal()
		if a := m.ALG.String(); a != "" && a != alg {
			return nil, reject(ReasonAlgNotAllowed, "alg %q does not match the key's alg %q", alg, a)
		}
		if m.USE != "" && m.USE != jwkset.UseSig {
			return nil, reject(ReasonUnknownKID, "key %q is not a signing key", truncate(kid, 64))
		}
		return publicKey(jwk.Key()), nil
	}
}

// accessTokenType: typ, when present, is one an access token carries (RFC 9068: at+jwt;
// most issuers write JWT).
func accessTokenType(typ any) bool {
	s, ok := typ.(string)
	if !ok {
		return false
	}
	switch strings.ToLower(strings.TrimPrefix(strings.ToLower(s), "application/")) {
	case "jwt", "at+jwt":
		return true
	}
	return false
}

// classify turns a jwt error into a TokenError. It never copies the library's message, which
// may quote token content. claims are the unverified claims, used only to tell which
// required claim was missing.
func classify(err error, claims jwt.MapClaims) error {
	var te *TokenError
	if errors.As(err, &te) {
		return te
	}
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return reject(ReasonMalformed, "not a well-formed JWT")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return reject(ReasonBadSignature, "signature does not verify")
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		// Only reached for an alg name jwt does not know; keyfunc errors are TokenErrors.
		return reject(ReasonAlgNotAllowed, "signing method unavailable")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		switch {
		case claims["exp"] == nil:
			return reject(ReasonMissingExp, "the token has no exp")
		case claims["iss"] == nil:
			return reject(ReasonWrongIssuer, "the token has no iss")
		default:
			return reject(ReasonWrongAudience, "the token has no aud")
		}
	case errors.Is(err, jwt.ErrTokenExpired):
		return reject(ReasonExpired, "exp is in the past")
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return reject(ReasonNotYetValid, "nbf or iat is in the future")
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return reject(ReasonWrongIssuer, "iss is not the configured issuer")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return reject(ReasonWrongAudience, "aud does not hold the configured audience")
	case errors.Is(err, jwt.ErrTokenInvalidClaims):
		return reject(ReasonBadClaims, "registered claims have the wrong type")
	}
	return reject(ReasonMalformed, "token rejected")
}

// KeysReady reports whether the verifier holds at least one key of the issuer: with none
// (a JWKS that went empty or unreadable), every token is refused.
func (v *Verifier) KeysReady(ctx context.Context) error {
	keys, err := v.keys.Storage().KeyReadAll(ctx)
	if err != nil {
		return fmt.Errorf("issuer keys: %w", err)
	}
	if len(keys) == 0 {
		return errors.New("issuer keys: the JWKS holds no key")
	}
	return nil
}
