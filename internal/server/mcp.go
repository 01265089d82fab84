package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xemahq/xema/internal/answer"
	"github.com/xemahq/xema/internal/buildinfo"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/metatool"
	"github.com/xemahq/xema/internal/unauth"
)

// Version is reported to MCP clients as serverInfo.version: the module version and commit
// of the binary (buildinfo.Info.Short), the same `xema version` prints.
var Version = buildinfo.Read().Short()

// MCPHandler serves the six meta-tools over MCP (streamable HTTP). Every request carries the
// same bearer token as the HTTP API and every tool call runs the same gateway code.
func (s *Server) MCPHandler() http.Handler {
	srv := mcp.NewServer(&mcp.Implementation{Name: "xema", Version: Version}, &mcp.ServerOptions{
		// Logging is what the SDK advertises when no capabilities are given; kept so that naming
		// the Tasks extension changes nothing else a client sees.
		Capabilities: &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}, //nolint:staticcheck // deprecated in 2026-07-28, still in the protocol versions clients speak
			Extensions: map[string]any{TasksExtension: map[string]any{}}}})
	s.addTasks(srv)
	srv.AddReceivingMiddleware(s.elicitMiddleware)
	tools := s.Tools
	addTool(srv, "xema_capabilities_search", "Find the capabilities you are armed and authorized to invoke. All arguments are optional; anchor with resourceType (or a resource noun in query); page with cursor from nextCursor.", searchSchema, tools.Search)
	addTool(srv, "xema_capabilities_describe", "Full input/output schemas, examples and side effects of up to 50 refs.", describeSchema,
		func(ctx context.Context, ec identity.ExecContext, req metatool.DescribeRequest) (describeResult, error) {
			d, err := tools.Describe(ctx, ec, req)
			return describeResult{Capabilities: d}, err
		})
	addTool(srv, "xema_capabilities_invoke", "Invoke a capability: {ref, input}; input must match the described inputSchema exactly. "+
		"With idempotencyKey, a retry with the same key returns the first call's answer instead of running it again. "+
		"A call held for a person's approval answers a task to poll (tasks/get) when the request declares the MCP Tasks extension; "+
		"otherwise PENDING_APPROVAL, and a retry with the same idempotencyKey answers the call's final result once it ran.", invokeSchema,
		func(ctx context.Context, ec identity.ExecContext, req mcpInvoke) (_ json.RawMessage, err error) {
			if len(req.Input) == 0 {
				return nil, invalidRequest("missing required field /input")
			}
			ans, err := s.call(ctx, ec, gateway.Request{Ref: req.Ref, Input: req.Input}, req.IdempotencyKey)
			if err != nil {
				return nil, err
			}
			if ans.Held() {
				s.offerTask(ctx, ec, ans)
			}
			offerConnect(ctx, ans)
			if !ans.Ran() {
				return nil, answerError{ans}
			}
			return ans.Body, nil
		})
	addTool(srv, "xema_capabilities_plan", "Shortest runnable sequence of capabilities to a goal capability from the resource types you hold.", planSchema, tools.Plan)
	addTool(srv, "xema_capabilities_preflight", "Check whether a call to ref could succeed now: requirements and blockers.", preflightSchema, tools.Preflight)
	addTool(srv, "xema_capabilities_explain", "Turn a denial code into what would unlock the capability: the grant, the org role, where to call from or when to retry (the same steps as the denial and why-denied).", explainSchema, tools.Explain)

	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true})
	return s.authenticateMCP(auth.RequireBearerToken(s.verifyMCP, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h))
}

// authenticateMCP verifies the bearer token before the SDK sees the request, so every refused
// attempt is audited (the SDK's middleware refuses a missing header without asking the
// verifier) and answered with the HTTP API's typed 401 body and its audit id.
func (s *Server) authenticateMCP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ec, err := s.verify(r)
		if err != nil {
			ge := s.unauthenticated(r, "/mcp", err)
			if ge.Kind == fault.Unauthenticated {
				s.challenge(w, r)
			}
			sendAnswer(w, errorAnswer(ge))
			return
		}
		if r.Body != nil {
			// boundBody has read the body (at most MaxBodyBytes) into memory.
			body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
			if err != nil || len(body) > MaxBodyBytes {
				tooLarge(w)
				return
			}
			if isBatch(body) {
				refuseBatch(w)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		next.ServeHTTP(w, r.WithContext(verifiedContext(r, ec)))
	})
}

// mcpInvoke is the arguments of xema_capabilities_invoke.
type mcpInvoke struct {
	Ref            string          `json:"ref"`
	Input          json.RawMessage `json:"input"`
	IdempotencyKey *string         `json:"idempotencyKey"`
}

// answerError is an invoke answered other than 200 (a denial, a hold, an error, or one
// stored under an idempotency key), answered as an isError result with its body.
type answerError struct{ ans answer.Answer }

func (e answerError) Error() string { return string(e.ans.Body) }

// describeResult wraps describe's array: MCP structured content is an object.
type describeResult struct {
	Capabilities []metatool.Description `json:"capabilities"`
}

// verifyMCP hands the SDK's bearer middleware the caller authenticateMCP verified.
func (s *Server) verifyMCP(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
	ec, ok := identity.CallerOf(r.Context())
	if !ok {
		return nil, fmt.Errorf("%w: no verified caller", auth.ErrInvalidToken)
	}
	return &auth.TokenInfo{UserID: ec.Subject.Ref}, nil
}

// addTool registers one meta-tool: arguments decoded strictly, the caller taken from the
// verified token, errors answered as isError results carrying the typed error body.
func addTool[Req, Res any](srv *mcp.Server, name, description string, schema json.RawMessage,
	tool func(context.Context, identity.ExecContext, Req) (Res, error)) {
	srv.AddTool(&mcp.Tool{Name: name, Description: description, InputSchema: schema},
		func(ctx context.Context, call *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			ec, ok := identity.CallerOf(ctx)
			if !ok {
				return toolError(fault.New(fault.Unauthenticated, unauth.CodeUnauthenticated, "no verified caller")), nil
			}
			var req Req
			args := call.Params.Arguments
			if len(args) == 0 {
				args = json.RawMessage("{}")
			}
			dec := json.NewDecoder(bytes.NewReader(args))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				return toolError(fault.New(fault.Invalid, CodeMalformedArguments, "arguments: %s", jsonError(err))), nil
			}
			res, err := tool(ctx, ec, req)
			if err != nil {
				return toolError(err), nil
			}
			raw, err := json.Marshal(res)
			if err != nil {
				return nil, fmt.Errorf("%s: encode result: %w", name, err)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(raw)}}, StructuredContent: json.RawMessage(raw)}, nil
		})
}

// toolError is a tool-level error: the same typed body the HTTP API answers.
func toolError(err error) *mcp.CallToolResult {
	ae, ok := err.(answerError)
	if !ok {
		ae = answerError{errorAnswer(faultOf(err))}
	}
	return answerResult(ae.ans)
}

// answerResult is an answer as a tool result: the body as text and, for a 200, as
// structured content; isError otherwise.
func answerResult(ans answer.Answer) *mcp.CallToolResult {
	text := []mcp.Content{&mcp.TextContent{Text: string(ans.Body)}}
	if !ans.Ran() {
		return &mcp.CallToolResult{IsError: true, Content: text}
	}
	return &mcp.CallToolResult{Content: text, StructuredContent: ans.Body}
}

// The meta-tools' input schemas; their limits are the gateway's own (meta.go).
var (
	searchSchema = json.RawMessage(`{"type":"object","additionalProperties":false,"properties":{
		"query":{"type":"string","description":"Free text over ref, title and summary; a resource noun anchors the search."},
		"domain":{"type":"string","description":"Only refs of this domain, e.g. connector."},
		"resourceType":{"type":"string","description":"Anchor: walk this resource type's capability-graph neighbourhood."},
		"mutating":{"type":"boolean","description":"true: only capabilities that write; false: only reads."},
		"limit":{"type":"integer","minimum":1,"maximum":` + strconv.Itoa(metatool.MaxSearchLimit) + `},
		"cursor":{"type":"string","description":"nextCursor of the previous page of the same query."}}}`)
	describeSchema = json.RawMessage(`{"type":"object","additionalProperties":false,"required":["refs"],"properties":{
		"refs":{"type":"array","minItems":1,"maxItems":` + strconv.Itoa(metatool.MaxDescribeRefs) + `,"items":{"type":"string"}}}}`)
	invokeSchema = json.RawMessage(`{"type":"object","additionalProperties":false,"required":["ref","input"],"properties":{
		"ref":{"type":"string"},"input":{"type":"object","description":"Exactly the shape describe returns as inputSchema."},
		"idempotencyKey":{"type":"string","minLength":1,"maxLength":255,"description":"Retry-safe key: the same key within 24 h returns the first call's answer."}}}`)
	planSchema = json.RawMessage(`{"type":"object","additionalProperties":false,"required":["goalCapabilityRef"],"properties":{
		"goalCapabilityRef":{"type":"string"},"fromResourceTypes":{"type":"array","items":{"type":"string"}},
		"maxDepth":{"type":"integer","minimum":1,"maximum":` + strconv.Itoa(metatool.MaxPlanDepth) + `}}}`)
	preflightSchema = json.RawMessage(`{"type":"object","additionalProperties":false,"required":["ref"],"properties":{"ref":{"type":"string"}}}`)
	explainSchema   = json.RawMessage(`{"type":"object","additionalProperties":false,"required":["capabilityRef","denialCode"],"properties":{
		"capabilityRef":{"type":"string"},"denialCode":{"type":"string"}}}`)
)
