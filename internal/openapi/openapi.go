// Package openapi builds the OpenAPI 3.1 document of the gateway's HTTP API
// (schemas/openapi.json, served at GET /openapi.json). The document is generated so that it
// cannot drift from the code: the bodies of the meta-tools, invoke, audit and approvals are
// inferred from their Go types, those of the kernel routes are the kernel capabilities' own
// inputSchema and outputSchema, and submitted manifests refer to schemas/*.schema.json.
// TestDocumentUpToDate fails when schemas/openapi.json differs from Build's answer
// (regenerate: go test ./internal/openapi -run TestDocumentUpToDate -update).
package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"reflect"
	"sort"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/xemahq/xema/internal/admin"
	"github.com/xemahq/xema/internal/approval"
	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/binding"
	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/explain"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/federation"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/insight"
	"github.com/xemahq/xema/internal/metatool"
	"github.com/xemahq/xema/schemas"
)

// Operation is one documented method of one path.
type Operation struct {
	Method, Path string
	Summary      string
	Tag          string
	// Public routes need no bearer token.
	Public bool
	// Ref is the kernel capability the route runs, when it runs one.
	Ref     string
	Params  []Param
	Request any // a schema (map) or nil
	// RequestOptional: the body may be empty.
	RequestOptional bool
	Responses       map[int]Response
}

// Param is a path or query parameter.
type Param struct {
	Name, In, Description string
	Required              bool
	Schema                map[string]any
}

// Response is one documented status: a JSON schema, or another media type.
type Response struct {
	Description string
	Schema      any    // JSON body schema; nil with MediaType "" is no body
	MediaType   string // "" is application/json
	Headers     map[string]string
}

func ref(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }

var str = map[string]any{"type": "string"}

// errorsOf documents the error statuses, all answered with the Error body but 403 (a
// denial, the Denial body).
func errorsOf(statuses ...int) map[int]Response {
	out := map[int]Response{}
	for _, st := range statuses {
		switch st {
		case http.StatusForbidden:
			out[st] = Response{Description: "denied: the structured denial with its reasons, suggestions and auditId", Schema: ref("Denial")}
		case http.StatusAccepted:
			out[st] = Response{Description: "held for human approval (or joined to the identical call of the caller already held): status pending-approval, approvalId and auditId", Schema: ref("Held"),
				Headers: map[string]string{"Location": "/v1/invocations/{approvalId}, where the caller follows the call", "Retry-After": "seconds between polls"}}
		case http.StatusUnauthorized:
			out[st] = Response{Description: "no or an invalid bearer token (the WWW-Authenticate header names the RFC 9728 metadata)", Schema: ref("Error"),
				Headers: map[string]string{"WWW-Authenticate": "Bearer resource_metadata=\"<base>/.well-known/oauth-protected-resource\""}}
		default:
			out[st] = Response{Description: http.StatusText(st), Schema: ref("Error")}
		}
	}
	return out
}

func merge(ms ...map[int]Response) map[int]Response {
	out := map[int]Response{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// Status sets of the route kinds.
var (
	// authed: every route behind the bearer token.
	authed = []int{401, 500, 503}
	// bodied: routes decoding a JSON body.
	bodied = []int{400, 413, 415}
	// funnel: routes that run a capability through the whole funnel.
	funnel = []int{202, 400, 403, 404, 409, 429}
)

func ok(status int, desc string, schema any) map[int]Response {
	return map[int]Response{status: {Description: desc, Schema: schema, Headers: map[string]string{}}}
}

// kernel is a route running kernel capability capRef: its body (or path/query input) is the
// capability's input, its answer the capability's output.
func kernel(method, path, summary, tag, capRef string, status int, withBody bool, params ...Param) Operation {
	op := Operation{Method: method, Path: path, Summary: summary, Tag: tag, Ref: capRef, Params: params,
		Responses: merge(errorsOf(authed...), errorsOf(funnel...))}
	if withBody {
		op.Request = "input:" + capRef
		for k, v := range errorsOf(bodied...) {
			op.Responses[k] = v
		}
	}
	op.Responses[status] = Response{Description: "the output of " + capRef + " (X-Xema-Audit-Id names its audit record)",
		Schema: "output:" + capRef, Headers: map[string]string{"X-Xema-Audit-Id": "the audit record of the call"}}
	return op
}

func pathParam(name, desc string) Param {
	return Param{Name: name, In: "path", Required: true, Description: desc, Schema: str}
}

func query(name, desc string) Param {
	return Param{Name: name, In: "query", Description: desc, Schema: str}
}

// meta is a meta-tool route: a strict JSON body in, a result out.
func meta(path, summary string, req any, res any) Operation {
	return Operation{Method: "POST", Path: path, Summary: summary, Tag: "capabilities", Request: req,
		Responses: merge(errorsOf(authed...), errorsOf(bodied...), errorsOf(404), ok(200, "the answer", res))}
}

// Operations is every route of the HTTP API: the Echo router of internal/server and the
// mounts of `xema serve` (the development issuer's JWKS, /mcp, /metrics).
func Operations() []Operation {
	ops := []Operation{
		{Method: "GET", Path: "/healthz", Summary: "Liveness", Tag: "operations", Public: true,
			Responses: ok(200, "the process answers", ref("Status"))},
		{Method: "GET", Path: "/readyz", Summary: "Readiness: the store answers and a policy is loaded", Tag: "operations", Public: true,
			Responses: merge(ok(200, "ready", ref("Status")), map[int]Response{503: {Description: "not ready (NOT_READY)", Schema: ref("Error")}})},
		{Method: "GET", Path: "/metrics", Summary: "Prometheus metrics (docs/operations.md names them; only the --metrics-reader subjects, or unauthenticated on --metrics-addr)", Tag: "operations",
			Responses: merge(errorsOf(authed...), map[int]Response{200: {Description: "the Prometheus text exposition format", MediaType: "text/plain", Schema: str},
				403: {Description: "not a --metrics-reader subject (DENIED)", Schema: ref("Error")}})},
		{Method: "GET", Path: "/openapi.json", Summary: "This document", Tag: "operations", Public: true,
			Responses: ok(200, "the OpenAPI 3.1 document of the HTTP API", map[string]any{"type": "object", "required": []string{"openapi", "paths"}})},
		{Method: "GET", Path: "/.well-known/oauth-protected-resource", Summary: "RFC 9728 protected resource metadata of the gateway", Tag: "discovery", Public: true,
			Responses: merge(ok(200, "the metadata", ref("ProtectedResourceMetadata")), errorsOf(405))},
		{Method: "GET", Path: "/.well-known/oauth-protected-resource/mcp", Summary: "RFC 9728 protected resource metadata of the MCP endpoint", Tag: "discovery", Public: true,
			Responses: merge(ok(200, "the metadata", ref("ProtectedResourceMetadata")), errorsOf(405))},
		{Method: "GET", Path: "/.well-known/jwks.json", Summary: "The development issuer's public keys (only without --issuer); verify the tokens the gateway sends providers with them", Tag: "discovery", Public: true,
			Responses: map[int]Response{200: {Description: "a JSON Web Key Set (RFC 7517)", MediaType: "application/jwk-set+json", Schema: ref("JWKS")}}},
		{Method: "GET", Path: "/", Summary: "Redirects to the web console", Tag: "console", Public: true,
			Responses: map[int]Response{302: {Description: "to /console/"}}},
		{Method: "GET", Path: "/console", Summary: "The web console (HTML)", Tag: "console", Public: true,
			Responses: map[int]Response{200: {Description: "the console page", MediaType: "text/html", Schema: str}, 301: {Description: "to /console/"}, 308: {Description: "to /console/"}}},
		{Method: "GET", Path: "/favicon.ico", Summary: "The console's icon (SVG), where browsers ask for a site's icon", Tag: "console", Public: true,
			Responses: map[int]Response{200: {Description: "the icon", MediaType: "image/svg+xml", Schema: str}}},
		{Method: "GET", Path: "/console/{path}", Summary: "The web console's page and assets (/console/assets/*)", Tag: "console", Public: true,
			Params:    []Param{pathParam("path", "a console view or an asset under assets/")},
			Responses: map[int]Response{200: {Description: "the page, a script or a stylesheet", MediaType: "text/html", Schema: str}, 404: {Description: "no such asset", MediaType: "text/plain", Schema: str}}},
		{Method: "POST", Path: "/console/token", Summary: "The console's sign-in (only with --console-client-id): forwards one authorization-code exchange (PKCE, public client) to the issuer's token endpoint and answers the access token only", Tag: "console", Public: true,
			Request: map[string]any{"type": "object", "additionalProperties": false, "required": []string{"code", "codeVerifier", "redirectUri"},
				"properties": map[string]any{"code": str, "codeVerifier": map[string]any{"type": "string", "minLength": 43, "maxLength": 128},
					"redirectUri": map[string]any{"type": "string", "description": "<public URL>/console/callback"}}},
			Responses: merge(ok(200, "the access token", map[string]any{"type": "object", "required": []string{"accessToken"},
				"properties": map[string]any{"accessToken": str, "expiresIn": map[string]any{"type": "integer"}}}),
				map[int]Response{400: {Description: "a malformed exchange, another redirect URI, or the issuer refused the code (BAD_REQUEST, SIGN_IN_REFUSED)", Schema: ref("Error")},
					403: {Description: "asked from another origin (FORBIDDEN_ORIGIN)", Schema: ref("Error")},
					404: {Description: "no --console-client-id", MediaType: "text/plain", Schema: str},
					415: {Description: "not application/json (UNSUPPORTED_MEDIA_TYPE)", Schema: ref("Error")},
					502: {Description: "the issuer's token endpoint did not answer (ISSUER_UNAVAILABLE)", Schema: ref("Error")}})},
		{Method: "POST", Path: "/mcp", Summary: "The MCP endpoint (streamable HTTP, stateless): the meta-tools and every capability the caller may invoke", Tag: "mcp",
			Request:   map[string]any{"description": "a JSON-RPC 2.0 message or batch (MCP)", "type": []string{"object", "array"}},
			Responses: merge(errorsOf(401), map[int]Response{200: {Description: "a JSON-RPC response (application/json or text/event-stream)", Schema: ref("JSONRPCResponse")}, 202: {Description: "a notification accepted"}, 400: {Description: "not a JSON-RPC message", MediaType: "text/plain", Schema: str}, 405: {Description: "method not allowed", MediaType: "text/plain", Schema: str}})},
		{Method: "GET", Path: "/mcp", Summary: "MCP server-to-client stream (not offered by the stateless endpoint)", Tag: "mcp",
			Responses: merge(errorsOf(401), map[int]Response{405: {Description: "the endpoint is stateless: no standalone stream", MediaType: "text/plain", Schema: str}})},
		{Method: "DELETE", Path: "/mcp", Summary: "MCP session end (no sessions: stateless)", Tag: "mcp",
			Responses: merge(errorsOf(401), map[int]Response{405: {Description: "the endpoint is stateless: no session to end", MediaType: "text/plain", Schema: str}})},

		{Method: "POST", Path: "/v1/capabilities/invoke", Summary: "Invoke a capability through the funnel (authenticate, route, validate, authorize, obligations, resolve, run, audit)", Tag: "capabilities",
			Request: ref("InvokeRequest"),
			Params: []Param{{Name: "Idempotency-Key", In: "header", Schema: str,
				Description: "a client's key for this call: a retry with the same key and body answers the first call's answer (Idempotent-Replayed: true) instead of running it again; 409 while it runs, 422 for another body"}},
			Responses: merge(errorsOf(authed...), errorsOf(bodied...), errorsOf(funnel...), errorsOf(422, 502, 504),
				ok(200, "the output, the auditId and the obligations the call met", ref("InvokeResult")))},
		meta("/v1/capabilities/search", "Search the capabilities the caller may invoke", ref("SearchRequest"), ref("SearchResult")),
		meta("/v1/capabilities/describe", "Full schemas of up to 20 capabilities", ref("DescribeRequest"), map[string]any{"type": "array", "items": ref("Description")}),
		meta("/v1/capabilities/plan", "The shortest runnable sequence of capabilities ending in a goal", ref("PlanRequest"), ref("PlanResult")),
		meta("/v1/capabilities/preflight", "Whether a call could succeed now, and what blocks it", ref("PreflightRequest"), ref("PreflightResult")),
		meta("/v1/capabilities/explain", "The grant or role that would unlock a capability denied with a code", ref("ExplainRequest"), ref("ExplainResult")),

		{Method: "POST", Path: "/v1/biomes", Summary: "Submit a biome version (its manifest and contributions) to the org's store", Tag: "biomes", Ref: admin.RefSubmit,
			Request: ref("BiomeSubmission"),
			Responses: merge(errorsOf(authed...), errorsOf(bodied...), errorsOf(funnel...), map[int]Response{
				201: {Description: "the submitted version and its permission digest", Schema: "output:" + admin.RefSubmit, Headers: map[string]string{"X-Xema-Audit-Id": "the audit record of the call"}},
				400: {Description: "INVALID_INPUT or INVALID_MANIFEST: every problem with its JSON pointer (violations)", Schema: ref("Error")}})},
		kernel("GET", "/v1/biomes", "The biomes of the org's store", "biomes", admin.RefBiomeList, 200, false, query("biomeId", "only this biome's versions")),
		kernel("GET", "/v1/biomes/{id}/{version}", "One biome version: manifest, capabilities and permission digest", "biomes", admin.RefBiomeGet, 200, false,
			pathParam("id", "biome id"), pathParam("version", "biome version")),
		withQuery(kernel("POST", "/v1/grants", "Approve a biome version's permission digest (?dryRun=true: answer the grant and its impact over recorded calls, record nothing)", "grants", admin.RefInstall, 201, true),
			200, "dryRun=true: the grant it would record and its impact", Param{Name: "dryRun", In: "query", Description: "true: record nothing, answer 200 with the impact", Schema: map[string]any{"type": "string", "enum": []string{"true", "false"}}},
			query("since", "with dryRun: replay the calls recorded this long ago until now, e.g. 24h (default 168h)")),
		kernel("GET", "/v1/grants", "The org's grants: active, superseded and revoked, with who approved, superseded or revoked each and when", "grants", admin.RefGrantList, 200, false, query("biomeId", "only this biome's grants")),
		with(withQuery(kernel("DELETE", "/v1/grants/{id}", "Revoke an active grant of the org (GRANT_NOT_FOUND for another org's; GRANT_NOT_ACTIVE for a superseded or revoked one; ?dryRun=true: answer what revoking would deny of the recorded calls, and which callers, revoke nothing)", "grants", admin.RefGrantRevoke, 200, false,
			pathParam("id", "grant id")),
			200, "the revoked grant, or with dryRun=true the grant and the impact, nothing revoked", Param{Name: "dryRun", In: "query", Description: "true: revoke nothing, answer the impact", Schema: map[string]any{"type": "string", "enum": []string{"true", "false"}}},
			query("since", "with dryRun: replay the calls recorded this long ago until now, e.g. 24h (default 168h)")), 409),
		with(withQuery(kernel("POST", "/v1/grants/{id}/change", "Change an active grant: a new grant of the same biome version (another profile or customize) supersedes it; answers the diff (?dryRun=true: and the impact over recorded calls, record nothing)", "grants", admin.RefGrantChange, 201, true,
			pathParam("id", "grant id")),
			200, "dryRun=true: the diff and the impact, nothing recorded", Param{Name: "dryRun", In: "query", Description: "true: record nothing, answer 200 with the diff and the impact", Schema: map[string]any{"type": "string", "enum": []string{"true", "false"}}},
			query("since", "with dryRun: replay the calls recorded this long ago until now, e.g. 24h (default 168h)")), 409),
		kernel("POST", "/v1/lifecycle", "Move a capability's lifecycle (publish, deprecate with a successor, retire)", "biomes", admin.RefLifecycle, 201, true),

		kernel("GET", "/v1/approvals", "Calls held for approval, newest first, a page at a time; each says whether the caller may decide it and, if not, why", "approvals", approval.RefList, 200, false,
			query("status", "pending, approved, rejected, expired, running, dispatched, done, failed, interrupted or withdrawn"), query("biome", "biome id"),
			query("ref", "capability ref"), query("requester", "subject ref"), query("cursor", "the nextCursor of the previous page"),
			Param{Name: "limit", In: "query", Description: "page size, 1-100 (default 50)", Schema: map[string]any{"type": "string", "pattern": "^[0-9]+$"}}),
		withAnswer(with(kernel("GET", "/v1/approvals/{id}", "One held call as the approvers' list shows it, with whether the caller may decide it (the console's deep link)", "approvals", approval.RefList, 200, false,
			pathParam("id", "approval id")), 404), 200, "the held call", ref("Invocation")),
		withGone(kernel("POST", "/v1/approvals/{id}/approve", "Approve a held call: it runs now", "approvals", approval.RefApprove, 200, true, pathParam("id", "approval id")), true),
		withGone(kernel("POST", "/v1/approvals/{id}/reject", "Reject a held call with a reason: it never runs", "approvals", approval.RefReject, 200, true, pathParam("id", "approval id")), false),
		{Method: "GET", Path: "/v1/invocations/{id}", Summary: "A held call's status and, once run, its output (the requester or an approver)", Tag: "approvals",
			Params: []Param{pathParam("id", "approval id")}, Responses: merge(errorsOf(authed...), errorsOf(404),
				map[int]Response{http.StatusForbidden: {Description: "AUDIENCE_INCOMPATIBLE: the output may not be read from the caller's environment", Schema: ref("Error")}},
				ok(200, "the held call", ref("Invocation")))},

		{Method: "GET", Path: "/v1/audit", Summary: "Search the org's audit records, newest first (administrators: every subject's; others: their own)", Tag: "audit",
			Params: []Param{query("ref", "capability ref"), query("subject", "subject ref"), query("decision", "a recorded decision"), query("reason", "a reason code"),
				query("parent", "records linked to this audit id"), query("since", "RFC 3339 time or a duration ago"), query("until", "RFC 3339 time or a duration ago"),
				{Name: "omit", In: "query", Description: "people-reads: leave out people's allowed reads through the gateway's own read operations (their console page loads)", Schema: map[string]any{"type": "string", "enum": []string{"people-reads"}}},
				query("cursor", "the nextCursor of the previous page"), {Name: "limit", In: "query", Description: "page size, 1-100 (default 50)", Schema: map[string]any{"type": "string", "pattern": "^[0-9]+$"}}},
			Responses: merge(errorsOf(authed...), errorsOf(400), ok(200, "a page of records", ref("AuditPage")))},
		{Method: "GET", Path: "/v1/audit/{id}", Summary: "One audit record the caller may read", Tag: "audit",
			Params: []Param{pathParam("id", "audit id")}, Responses: merge(errorsOf(authed...), errorsOf(404), ok(200, "the record", ref("AuditRecord")))},
		{Method: "GET", Path: "/v1/audit/{id}/why-denied", Summary: "The structured denial of a denied call", Tag: "audit",
			Params: []Param{pathParam("id", "audit id")}, Responses: merge(errorsOf(authed...), errorsOf(404, 409), ok(200, "the denial", ref("WhyDenied")))},
		{Method: "GET", Path: "/v1/profiles", Summary: "The built-in grant profiles and what each admits, and the named environments a grant or token may name", Tag: "grants",
			Responses: merge(errorsOf(authed...), ok(200, "profiles by name", ref("Profiles")))},

		kernel("GET", "/v1/stats", "The org's calls over a window, counted from the audit log: by time and outcome, top denial reasons and refs, held calls waiting, runners, policy revisions", "audit", insight.RefStats, 200, false,
			Param{Name: "window", In: "query", Description: "1h, 24h (default) or 7d", Schema: map[string]any{"type": "string", "enum": []string{"1h", "24h", "7d"}}}),
		kernel("GET", "/v1/catalog/{ref}", "One capability of the org's catalog: manifest, lifecycle, serving biome version and the grants that cover it", "capabilities", insight.RefCapability, 200, false,
			pathParam("ref", "capability ref, e.g. kb:page.read@1")),
		{Method: "GET", Path: "/v1/me", Summary: "The caller as the token names it, and the gateway's own operations it may invoke", Tag: "operations",
			Responses: merge(errorsOf(authed...), ok(200, "the caller", ref("Caller")))},

		kernel("POST", "/v1/credentials", "Store a credential (sealed; never answered back)", "bindings", binding.RefCredentialCreate, 201, true),
		kernel("GET", "/v1/credentials", "The org's credentials (metadata only)", "bindings", binding.RefCredentialList, 200, false),
		kernel("DELETE", "/v1/credentials/{id}", "Delete a credential no binding uses", "bindings", binding.RefCredentialDelete, 200, false, pathParam("id", "credential id")),
		kernel("POST", "/v1/bindings", "Bind a provider of a biome to a credential", "bindings", binding.RefCreate, 201, true),
		kernel("GET", "/v1/bindings", "The org's bindings", "bindings", binding.RefList, 200, false),
		kernel("DELETE", "/v1/bindings/{id}", "Delete a binding", "bindings", binding.RefDelete, 200, false, pathParam("id", "binding id")),

		kernel("POST", "/v1/mcp-servers", "Register an external MCP server (its tools become capabilities)", "mcp-servers", federation.RefRegister, 201, true),
		kernel("GET", "/v1/mcp-servers", "The org's registered MCP servers", "mcp-servers", federation.RefList, 200, false),
		with(kernel("POST", "/v1/mcp-servers/{id}/sync", "Sync an MCP server's tools now", "mcp-servers", federation.RefSync, 200, false, pathParam("id", "the server's providerId")), 422, 502, 504),

		kernel("GET", "/v1/connections", "The org's OAuth-protected servers the caller can connect, and the connections the caller may see (never a token)", "connections", connection.RefList, 200, false),
		kernel("POST", "/v1/connections", "Start connecting the caller's own account (or, for an org admin, the org's) to an OAuth-protected MCP server: answers the authorization URL to open", "connections", connection.RefConnect, 200, true),
		with(kernel("DELETE", "/v1/connections/{id}", "Disconnect: delete the connection and revoke its tokens at the authorization server", "connections", connection.RefDisconnect, 200, false, pathParam("id", "connection id")), 502),
		{Method: "GET", Path: "/v1/connections/callback", Summary: "The authorization server's redirect after a person consented (or refused): stores the connection and answers a page saying so", Tag: "connections",
			Params: []Param{{Name: "state", In: "query", Description: "the authorization request's state", Schema: str},
				{Name: "code", In: "query", Description: "the authorization code", Schema: str},
				{Name: "error", In: "query", Description: "the authorization server's error code, when it refused", Schema: str}},
			Responses: map[int]Response{
				200: {Description: "an HTML page: the account is connected", MediaType: "text/html", Schema: str},
				400: {Description: "an HTML page: the state is unknown, used, expired or the authorization was refused (INVALID_CONNECTION_STATE, AUTHORIZATION_FAILED)", MediaType: "text/html", Schema: str},
				502: {Description: "an HTML page: the authorization server refused the code exchange (AUTHORIZATION_FAILED)", MediaType: "text/html", Schema: str}}},

		{Method: "GET", Path: "/v1/bundles/xema.tar.gz", Summary: "The policy bundle in OPA's format, for a stock OPA (only the --bundle-reader subjects)", Tag: "operations",
			Params: []Param{{Name: "If-None-Match", In: "header", Description: "the ETag of the bundle held", Schema: str}},
			Responses: merge(errorsOf(authed...), map[int]Response{
				200: {Description: "the bundle (ETag: its revision)", MediaType: "application/gzip", Schema: map[string]any{"type": "string", "contentEncoding": "binary"}, Headers: map[string]string{"ETag": "the bundle's revision, quoted"}},
				304: {Description: "the bundle held is current"},
				403: {Description: "not a --bundle-reader subject (DENIED)", Schema: ref("Error")}})},
	}
	sort.SliceStable(ops, func(i, j int) bool {
		if ops[i].Path != ops[j].Path {
			return ops[i].Path < ops[j].Path
		}
		return ops[i].Method < ops[j].Method
	})
	return ops
}

func with(op Operation, statuses ...int) Operation {
	for k, v := range errorsOf(statuses...) {
		op.Responses[k] = v
	}
	return op
}

// withGone: deciding an expired approval answers 410; approve runs the held call (a
// provider's failure answers like invoke's).
func withGone(op Operation, runs bool) Operation {
	op.RequestOptional = true
	op = with(op, 410)
	if runs {
		op = with(op, 502, 504)
	}
	return op
}

// withAnswer: the route answers schema with status, not its capability's output.
func withAnswer(op Operation, status int, desc string, schema any) Operation {
	op.Responses[status] = Response{Description: desc, Schema: schema, Headers: map[string]string{"X-Xema-Audit-Id": "the audit record of the call"}}
	return op
}

func withQuery(op Operation, status int, desc string, params ...Param) Operation {
	op.Params = append(op.Params, params...)
	op.Responses[status] = Response{Description: desc, Schema: "output:" + op.Ref, Headers: map[string]string{"X-Xema-Audit-Id": "the audit record of the call"}}
	return op
}

// Build answers the document, indented, as kept in schemas/openapi.json.
func Build() ([]byte, error) {
	kernelSchemas, err := kernelCapabilitySchemas()
	if err != nil {
		return nil, err
	}
	components, err := typeSchemas()
	if err != nil {
		return nil, err
	}
	resolve := func(s any) (any, error) {
		name, isName := s.(string)
		if !isName {
			return s, nil
		}
		ks, found := kernelSchemas[name]
		if !found {
			return nil, fmt.Errorf("openapi: no schema %s", name)
		}
		key := componentName(name)
		components[key] = ks
		return ref(key), nil
	}
	paths := map[string]map[string]any{}
	for _, op := range Operations() {
		o := map[string]any{"summary": op.Summary, "tags": []string{op.Tag},
			"operationId": strings.ToLower(op.Method) + operationName(op.Path)}
		if op.Ref != "" {
			o["x-xema-capability"] = op.Ref
		}
		if op.Public {
			o["security"] = []any{}
		}
		if len(op.Params) > 0 {
			var ps []any
			for _, p := range op.Params {
				pm := map[string]any{"name": p.Name, "in": p.In, "schema": p.Schema}
				if p.Required {
					pm["required"] = true
				}
				if p.Description != "" {
					pm["description"] = p.Description
				}
				ps = append(ps, pm)
			}
			o["parameters"] = ps
		}
		if op.Request != nil {
			s, err := resolve(op.Request)
			if err != nil {
				return nil, err
			}
			o["requestBody"] = map[string]any{"required": !op.RequestOptional, "content": map[string]any{"application/json": map[string]any{"schema": s}}}
		}
		responses := map[string]any{}
		for st, r := range op.Responses {
			rm := map[string]any{"description": r.Description}
			if r.Description == "" {
				rm["description"] = http.StatusText(st)
			}
			if r.Schema != nil {
				s, err := resolve(r.Schema)
				if err != nil {
					return nil, err
				}
				mt := r.MediaType
				if mt == "" {
					mt = "application/json"
				}
				rm["content"] = map[string]any{mt: map[string]any{"schema": s}}
			}
			if len(r.Headers) > 0 {
				hs := map[string]any{}
				for h, d := range r.Headers {
					hs[h] = map[string]any{"description": d, "schema": str}
				}
				rm["headers"] = hs
			}
			responses[fmt.Sprint(st)] = rm
		}
		o["responses"] = responses
		if paths[op.Path] == nil {
			paths[op.Path] = map[string]any{}
		}
		paths[op.Path][strings.ToLower(op.Method)] = o
	}
	doc := map[string]any{
		"openapi":           "3.1.0",
		"jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
		"info": map[string]any{"title": "Xema capability gateway", "version": "1",
			"description": "The HTTP API of `xema serve`. Generated by internal/openapi; do not edit by hand. Every error is a typed JSON body {code, message}; a policy denial (403) is the structured denial with its auditId."},
		"paths": paths,
		"components": map[string]any{
			"schemas": components,
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
				"description": "an access token of the --issuer (or `xema dev token` with the development issuer)"}},
		},
		"security": []any{map[string]any{"bearer": []string{}}},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func operationName(path string) string {
	var b strings.Builder
	up := true
	for _, r := range path {
		switch {
		case r == '/' || r == '-' || r == '.' || r == '{' || r == '}' || r == '_':
			up = true
		case up:
			b.WriteString(strings.ToUpper(string(r)))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// componentName turns "input:biome:install@1" into "BiomeInstall1Input".
func componentName(s string) string {
	kind, capRef, _ := strings.Cut(s, ":")
	return operationName("/"+strings.NewReplacer(":", "/", "@", "/").Replace(capRef)) + strings.ToUpper(kind[:1]) + kind[1:]
}

// kernelCapabilitySchemas maps "input:REF" and "output:REF" to the kernel capabilities'
// schemas, as the gateway validates them.
func kernelCapabilitySchemas() (map[string]any, error) {
	out := map[string]any{}
	for _, fsys := range []fs.FS{admin.Contributions, binding.Contributions, federation.Contributions, approval.Contributions, insight.Contributions, connection.Contributions} {
		files, err := fs.Glob(fsys, "contributions/*.json")
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			raw, err := fs.ReadFile(fsys, f)
			if err != nil {
				return nil, err
			}
			var c struct {
				Manifest struct {
					Ref          string         `json:"ref"`
					InputSchema  map[string]any `json:"inputSchema"`
					OutputSchema map[string]any `json:"outputSchema"`
				} `json:"manifest"`
			}
			if err := json.Unmarshal(raw, &c); err != nil {
				return nil, fmt.Errorf("openapi: %s: %w", f, err)
			}
			out["input:"+c.Manifest.Ref] = c.Manifest.InputSchema
			out["output:"+c.Manifest.Ref] = c.Manifest.OutputSchema
		}
	}
	return out, nil
}

// typeSchemas are the components inferred from the Go types the routes answer.
func typeSchemas() (map[string]any, error) {
	anyJSON := &jsonschema.Schema{}
	opts := &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[json.RawMessage](): anyJSON,
	}}
	types := map[string]reflect.Type{
		"InvokeRequest":    reflect.TypeFor[gateway.Request](),
		"InvokeResult":     reflect.TypeFor[gateway.Result](),
		"SearchRequest":    reflect.TypeFor[metatool.SearchRequest](),
		"SearchResult":     reflect.TypeFor[metatool.SearchResult](),
		"DescribeRequest":  reflect.TypeFor[metatool.DescribeRequest](),
		"Description":      reflect.TypeFor[metatool.Description](),
		"PlanRequest":      reflect.TypeFor[metatool.PlanRequest](),
		"PlanResult":       reflect.TypeFor[metatool.PlanResult](),
		"PreflightRequest": reflect.TypeFor[metatool.PreflightRequest](),
		"PreflightResult":  reflect.TypeFor[metatool.PreflightResult](),
		"ExplainRequest":   reflect.TypeFor[metatool.ExplainRequest](),
		"ExplainResult":    reflect.TypeFor[metatool.ExplainResult](),
		"AuditRecord":      reflect.TypeFor[audit.Record](),
		"WhyDenied":        reflect.TypeFor[explain.Denial](),
		"Invocation":       reflect.TypeFor[approval.View](),
		"ProfileSet":       reflect.TypeFor[grant.Profiles](),
		"Caller":           reflect.TypeFor[metatool.Caller](),
	}
	out := map[string]any{}
	for name, t := range types {
		s, err := jsonschema.ForType(t, opts)
		if err != nil {
			return nil, fmt.Errorf("openapi: %s: %w", name, err)
		}
		v, err := toAny(s)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(name, "Request") {
			// The body decoder requires nothing by itself; the route names what is missing.
			delete(v, "required")
		}
		out[name] = v
	}
	out["InvokeRequest"].(map[string]any)["required"] = []string{"ref", "input"}
	out["ExplainRequest"].(map[string]any)["required"] = []string{"capabilityRef", "denialCode"}
	out["AuditPage"] = map[string]any{"type": "object", "required": []string{"records"}, "additionalProperties": false,
		"properties": map[string]any{"records": map[string]any{"type": "array", "items": ref("AuditRecord")}, "nextCursor": str}}
	out["Profiles"] = map[string]any{"type": "object", "required": []string{"profiles", "environments"}, "additionalProperties": false,
		"properties": map[string]any{"profiles": ref("ProfileSet"),
			"environments": map[string]any{"type": "object", "description": "every named environment (--environments) and its kind",
				"additionalProperties": map[string]any{"type": "string", "enum": grant.Kinds}}}}
	out["Status"] = map[string]any{"type": "object", "required": []string{"status"}, "properties": map[string]any{"status": str}}
	// Error is inferred from fault.Error (so a new field cannot go undocumented), with the
	// fields' meaning added.
	errSchema, err := jsonschema.For[fault.Error](opts)
	if err != nil {
		return nil, fmt.Errorf("openapi: Error: %w", err)
	}
	errAny, err := toAny(errSchema)
	if err != nil {
		return nil, err
	}
	errAny["description"] = "every error answer: a code and a human message, never a stack trace"
	props := errAny["properties"].(map[string]any)
	for name, desc := range map[string]string{
		"auditId":               "the audit record of the refused call, when one was written",
		"violations":            "INVALID_INPUT, INVALID_MANIFEST, INVALID_OUTPUT: each problem with its JSON pointer",
		"retryAfter":            "seconds (also the Retry-After header)",
		"providerStatus":        "the provider's HTTP status",
		"providerBody":          "PROVIDER_ERROR: the provider's own error body (JSON or plain text, at most 4 KiB), not the gateway's words",
		"providerBodyTruncated": "providerBody was cut to its bound",
		"outcome":               "OUTCOME_NOT_RECORDED: how the call ended, as far as the gateway knows",
	} {
		if p, ok := props[name].(map[string]any); ok {
			p["description"] = desc
		}
	}
	if p, ok := props["code"].(map[string]any); ok {
		p["description"] = "a stable code; x-codes lists every code the gateway declares"
		p["x-codes"] = Codes
	}
	out["Error"] = errAny
	held, err := jsonschema.For[gateway.Held](opts)
	if err != nil {
		return nil, fmt.Errorf("openapi: Held: %w", err)
	}
	if out["Held"], err = toAny(held); err != nil {
		return nil, err
	}
	out["Violation"] = map[string]any{"type": "object", "required": []string{"path", "message"}, "additionalProperties": false,
		"properties": map[string]any{"path": map[string]any{"type": "string", "description": "RFC 6901 pointer"}, "message": str}}
	denial := out["WhyDenied"].(map[string]any)
	dprops := map[string]any{"code": str, "message": str, "retryAfter": map[string]any{"type": "integer"}}
	for k, v := range denial["properties"].(map[string]any) {
		dprops[k] = v
	}
	out["Denial"] = map[string]any{"description": "a policy denial: the structured denial plus code and message", "type": "object",
		"required": append(append([]any{}, denial["required"].([]any)...), "code", "message"), "additionalProperties": false, "properties": dprops}
	out["BiomeSubmission"] = map[string]any{"type": "object", "required": []string{"manifest", "contributions"},
		"properties": map[string]any{
			"manifest":      map[string]any{"$ref": schemas.BiomeID},
			"contributions": map[string]any{"type": "array", "items": map[string]any{"$ref": schemas.ContributionID}},
		}}
	out["ProtectedResourceMetadata"] = map[string]any{"description": "RFC 9728 §2", "type": "object", "required": []string{"resource"},
		"properties": map[string]any{"resource": str, "authorization_servers": map[string]any{"type": "array", "items": str},
			"jwks_uri": str, "bearer_methods_supported": map[string]any{"type": "array", "items": str}, "resource_name": str}}
	out["JWKS"] = map[string]any{"type": "object", "required": []string{"keys"},
		"properties": map[string]any{"keys": map[string]any{"type": "array", "items": map[string]any{"type": "object", "required": []string{"kty", "kid"},
			"properties": map[string]any{"kty": str, "kid": str, "alg": str, "use": str}}}}}
	out["JSONRPCResponse"] = map[string]any{"description": "JSON-RPC 2.0 (MCP)", "type": "object", "required": []string{"jsonrpc"},
		"properties": map[string]any{"jsonrpc": map[string]any{"const": "2.0"}, "id": map[string]any{}, "result": map[string]any{}, "error": map[string]any{"type": "object"}}}
	return out, nil
}

func toAny(s *jsonschema.Schema) (map[string]any, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var v map[string]any
	err = json.Unmarshal(raw, &v)
	return v, err
}
