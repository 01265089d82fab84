// Package server is the HTTP surface of the gateway (Echo): thin routes onto the funnel and
// the meta-tools, typed JSON errors, bearer-token authentication, health and metrics.
package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"

	"github.com/xemahq/xema/internal/answer"
	"github.com/xemahq/xema/internal/approval"
	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/console"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/idempotency"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/metatool"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/telemetry"
	"github.com/xemahq/xema/internal/unauth"
	"github.com/xemahq/xema/schemas"
)

// MaxBodyBytes is the documented limit of a request body.
const MaxBodyBytes = 1 << 20

// Authenticator verifies a request's bearer token.
type Authenticator interface {
	Authenticate(r *http.Request) (identity.ExecContext, error)
}

// Readiness reports whether the store answers and a policy is loaded.
type Readiness func(ctx context.Context) error

// AuditReader reads audit records (store.Store).
type AuditReader interface {
	GetAudit(ctx context.Context, id string) (store.AuditRecord, error)
	ListAudit(ctx context.Context, q store.AuditQuery) ([]store.AuditRecord, error)
	// PruneBoundary says up to when records were pruned (a search window reaching before it
	// is told so).
	PruneBoundary(ctx context.Context) (store.PruneBoundary, error)
}

// Server holds the routes' dependencies.
type Server struct {
	Gateway *gateway.Gateway
	// Tools answers the meta-tools other than invoke (search, describe, plan, preflight, explain, whoami).
	Tools *metatool.Tools
	// Idempotency keeps the answers of calls made with an Idempotency-Key.
	Idempotency *idempotency.Keys
	// Environments are the named environments grants and tokens may name (GET /v1/profiles).
	Environments grant.Environments
	// Audit reads the audit records (why-denied, the audit search).
	Audit   AuditReader
	Auth    Authenticator
	Ready   Readiness
	Bundles BundleSource
	// OperatorOrg is the org whose administrators read audit records of no org; "" is nobody.
	OperatorOrg string
	// Approvals serves GET /v1/invocations/{id}; nil answers 404.
	Approvals *approval.Service
	// Extra mounts (JWKS of the development issuer, metrics, MCP, bundle) by path.
	Mounts map[string]http.Handler
	// BundleReaders are the subject refs (xema serve --bundle-reader) the policy bundle is
	// served to; nobody else may fetch it.
	BundleReaders []string
	// MetricsReaders are the subject refs (xema serve --metrics-reader) GET /metrics is
	// served to on this listener.
	MetricsReaders []string
	// BodyReadTimeout bounds reading a request's body (0: DefaultBodyReadTimeout); the
	// headers are bounded by the http.Server's ReadHeaderTimeout.
	BodyReadTimeout time.Duration
	// CORSOrigins are the browser origins (xema serve --cors-origin) granted CORS; no other is.
	CORSOrigins []string
	// PublicURL is the gateway's external base URL (behind a proxy); "" derives it from the
	// request. It names the resource in the RFC 9728 metadata and the 401 challenge.
	PublicURL string
	// AuthorizationServers are the issuers named in the RFC 9728 metadata (the --issuer).
	AuthorizationServers []string
	// ConsoleOIDC is the console's production sign-in (xema serve --console-client-id); nil
	// offers only the pasted token.
	ConsoleOIDC *console.OIDC
	// Connector finishes connections at GET /v1/connections/callback; nil answers that
	// connections are not configured.
	Connector Connector
}

// errorBody is every error answer: a code and a human message.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Handler builds the Echo router.
func (s *Server) Handler() http.Handler { return s.cors(s.boundBody(s.router())) }

// router is every route of the HTTP API; schemas/openapi.json documents each of them
// (TestOpenAPIDocumentsEveryRoute).
func (s *Server) router() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(measure)
	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", s.readyz)
	e.GET("/openapi.json", openAPI)
	e.GET(ProtectedResourcePath, echo.WrapHandler(s.protectedResource("")))
	e.GET(ProtectedResourcePath+"/mcp", echo.WrapHandler(s.protectedResource("/mcp")))
	for path, h := range s.Mounts {
		e.Any(path, echo.WrapHandler(h))
	}
	// The web console: static pages whose script calls /v1 with the person's own token.
	con := echo.WrapHandler(console.New(s.ConsoleOIDC))
	e.GET("/console", con)
	e.GET("/console/*", con)
	e.POST(console.TokenPath, con)
	e.GET(console.FaviconPath, con)
	// The authorization server's redirect carries no gateway token: its state is its check.
	e.GET(connection.CallbackPath, s.connectionCallback)
	v1 := e.Group("/v1", s.authenticate)
	v1.POST("/capabilities/invoke", s.invoke)
	s.metaRoutes(v1)
	s.adminRoutes(v1)
	s.bindingRoutes(v1)
	s.mcpServerRoutes(v1)
	s.connectionRoutes(v1)
	s.auditRoutes(v1)
	s.approvalRoutes(v1)
	s.insightRoutes(v1)
	v1.GET("/bundles/xema.tar.gz", s.bundle)
	// Metrics name every org's refs: served only to the subjects the operator names (an
	// unauthenticated scrape is for xema serve --metrics-addr, a listener of its own).
	e.GET("/metrics", s.metrics, s.authenticate)
	// The root is the console's: a person opening the gateway's address lands there.
	e.GET("/", func(c echo.Context) error { return c.Redirect(http.StatusFound, "/console/") })
	e.HTTPErrorHandler = methodAware(e)
	return e
}

// methodAware answers a request whose path a route of another method serves with 405 and
// the Allow header instead of the router's 404 (the /v1 group's not-found route, there for
// its middleware, catches every method otherwise); any other error goes to httpError.
func methodAware(e *echo.Echo) echo.HTTPErrorHandler {
	type route struct{ method, path string }
	var routes []route
	for _, r := range e.Routes() {
		if r.Method != echo.RouteNotFound {
			routes = append(routes, route{r.Method, r.Path})
		}
	}
	return func(err error, c echo.Context) {
		var he *echo.HTTPError
		if errors.As(err, &he) && (he.Code == http.StatusNotFound || he.Code == http.StatusMethodNotAllowed) {
			var allow []string
			for _, r := range routes {
				if routeMatches(r.path, c.Request().URL.Path) && !slices.Contains(allow, r.method) {
					allow = append(allow, r.method)
				}
			}
			if len(allow) > 0 && !slices.Contains(allow, c.Request().Method) {
				slices.Sort(allow)
				c.Response().Header().Set("Allow", strings.Join(allow, ", "))
				_ = c.JSON(http.StatusMethodNotAllowed, errorBody{Code: CodeMethodNotAllowed,
					Message: fmt.Sprintf("%s %s: this path takes %s", c.Request().Method, c.Request().URL.Path, strings.Join(allow, ", "))})
				return
			}
		}
		httpError(err, c)
	}
}

// routeMatches reports whether path fits an Echo route pattern (":name" one segment, "*"
// the rest).
func routeMatches(pattern, path string) bool {
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	for i, p := range ps {
		switch {
		case p == "*":
			return true
		case i >= len(xs):
			return false
		case strings.HasPrefix(p, ":"):
			if xs[i] == "" {
				return false
			}
		case p != xs[i]:
			return false
		}
	}
	return len(ps) == len(xs)
}

func (s *Server) metrics(c echo.Context) error {
	if !slices.Contains(s.MetricsReaders, execOf(c).Subject.Ref) {
		return fault.New(fault.Denied, gateway.CodeDenied, "metrics are served only to the subjects the operator names (xema serve --metrics-reader), or on --metrics-addr")
	}
	MetricsHandler().ServeHTTP(c.Response(), c.Request())
	return nil
}

// openAPI serves the OpenAPI 3.1 document of this API (schemas/openapi.json).
func openAPI(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "max-age=300")
	return c.Blob(http.StatusOK, "application/json", schemas.OpenAPI)
}

func (s *Server) readyz(c echo.Context) error {
	if err := s.Ready(c.Request().Context()); err != nil {
		return c.JSON(http.StatusServiceUnavailable, errorBody{Code: CodeNotReady, Message: err.Error()})
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}

// authenticate verifies the bearer token; nothing behind it runs without a verified caller.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ec, err := s.verify(c.Request())
		if err != nil {
			answer := s.unauthenticated(c.Request(), c.Path(), err)
			if answer.Kind == fault.Unauthenticated {
				s.challenge(c.Response(), c.Request())
			}
			return answer
		}
		c.SetRequest(c.Request().WithContext(verifiedContext(c.Request(), ec)))
		return next(c)
	}
}

// verifiedContext is r's context carrying ec and the bearer token it was verified from.
func verifiedContext(r *http.Request, ec identity.ExecContext) context.Context {
	tok, _ := identity.BearerToken(r) // verified just now: present
	return identity.WithVerified(r.Context(), ec, tok)
}

// verify is the funnel's authenticate step: the bearer token checked against the issuer.
func (s *Server) verify(r *http.Request) (identity.ExecContext, error) {
	_, step := telemetry.Start(r.Context(), telemetry.StepAuthenticate)
	ec, err := s.Auth.Authenticate(r)
	if err != nil {
		step.End(unauth.CodeUnauthenticated, telemetry.AttrReason.String(identity.Reason(err)))
		return ec, err
	}
	step.End("", attribute.String("xema.subject_kind", ec.Subject.Kind))
	return ec, nil
}

// unauthenticated audits the refused attempt and answers 401. The verifier's messages never
// contain the token.
// The source is the TCP peer, never a forwarded-for header a client could rotate (the
// aggregator's bucket map is bounded either way).
func (s *Server) unauthenticated(r *http.Request, route string, err error) *fault.Error {
	reason := identity.Reason(err)
	source := r.RemoteAddr
	if host, _, serr := net.SplitHostPort(source); serr == nil {
		source = host
	}
	id, aerr := s.Gateway.RecordUnauthenticated(r.Context(), route, reason, source)
	if aerr != nil {
		return faultOf(aerr)
	}
	slog.Debug("unauthenticated request", "route", route, "reason", reason, "auditId", id)
	return &fault.Error{Kind: fault.Unauthenticated, Code: unauth.CodeUnauthenticated, Message: err.Error(), AuditID: id}
}

func execOf(c echo.Context) identity.ExecContext {
	ec, _ := identity.CallerOf(c.Request().Context())
	return ec
}

// bind decodes a JSON body strictly: JSON content type, size-limited, one value, no unknown
// fields.
func bind(c echo.Context, v any) error {
	ct := c.Request().Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return fault.New(fault.UnsupportedMedia, CodeUnsupportedMediaType, "Content-Type must be application/json, got %q", ct)
	}
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, MaxBodyBytes+1))
	if err != nil {
		return fault.New(fault.Invalid, CodeBadRequest, "reading the body failed")
	}
	if len(body) > MaxBodyBytes {
		return fault.New(fault.TooLarge, CodeBodyTooLarge, "body exceeds %d bytes", MaxBodyBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fault.New(fault.Invalid, CodeMalformedJSON, "malformed request body: %s", jsonError(err))
	}
	if dec.More() {
		return fault.New(fault.Invalid, CodeMalformedJSON, "malformed request body: more than one JSON value")
	}
	return nil
}

// jsonError turns a decoding error into a message naming the field, without echoing input.
func jsonError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q must be %s, got %s", "/"+strings.ReplaceAll(te.Field, ".", "/"), te.Type, te.Value)
	case errors.Is(err, io.EOF):
		return "empty body"
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	return "invalid JSON"
}

// httpError writes every error as a typed JSON body, never a stack trace.
func httpError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var ge *fault.Error
	var he *echo.HTTPError
	switch {
	case errors.As(err, &ge):
		_ = writeAnswer(c, errorAnswer(ge))
	case errors.As(err, &he):
		_ = c.JSON(he.Code, errorBody{Code: strings.ToUpper(strings.ReplaceAll(http.StatusText(he.Code), " ", "_")), Message: fmt.Sprint(he.Message)})
	default:
		slog.Error("request failed", "path", c.Path(), "err", err)
		_ = c.JSON(http.StatusInternalServerError, errorBody{Code: fault.CodeInternal, Message: "internal error"})
	}
}

// invoke is POST /v1/capabilities/invoke.
func (s *Server) invoke(c echo.Context) error {
	var req gateway.Request
	if err := bind(c, &req); err != nil {
		return err
	}
	if req.Ref == "" {
		return invalidRequest("missing required field /ref")
	}
	if len(req.Input) == 0 {
		return invalidRequest("missing required field /input")
	}
	var key *string
	if k := c.Request().Header.Get(IdempotencyHeader); k != "" {
		key = &k
	}
	ans, err := s.call(c.Request().Context(), execOf(c), req, key)
	if err != nil {
		return err
	}
	return writeAnswer(c, ans)
}

// call is the one invoke both edges make: through the idempotency layer when a key is
// given (a replayed hold answered where the held call now stands), else straight through
// the funnel. The error is the idempotency layer's refusal of the key itself.
func (s *Server) call(ctx context.Context, ec identity.ExecContext, req gateway.Request, key *string) (answer.Answer, error) {
	if key == nil {
		ans, _ := answerOf(s.Gateway.Invoke(ctx, ec, req))
		return ans, nil
	}
	ans, err := s.Idempotency.Invoke(ctx, ec, req, *key)
	if err != nil {
		return answer.Answer{}, err
	}
	return s.replayNow(ctx, ec, ans), nil
}

// IdempotencyHeader carries a client's idempotency key on POST /v1/capabilities/invoke;
// ReplayedHeader marks an answer that is the stored answer of the key's first call.
const (
	IdempotencyHeader = "Idempotency-Key"
	ReplayedHeader    = "Idempotent-Replayed"
)
