package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xemahq/xema/internal/answer"
	"github.com/xemahq/xema/internal/approval"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/store"
)

// The MCP Tasks extension (io.modelcontextprotocol/tasks, docs/approvals.md): a tools/call
// of xema_capabilities_invoke held for approval answers a CreateTaskResult when the request
// declares the extension; the held call is the task, its approval id the task id. go-sdk
// v1.8.0 has no Tasks, so the extension is built beside it: a receiving middleware turns the
// held answer into the task, and tasks/get, tasks/cancel and tasks/update are custom methods.
const (
	TasksExtension         = "io.modelcontextprotocol/tasks"
	clientCapabilitiesMeta = "io.modelcontextprotocol/clientCapabilities"
	// TaskPollInterval is the pollIntervalMs told to clients: a held call waits for a person.
	TaskPollInterval = 5 * time.Second
	// heldRunning is the status of a held call's answer, replayed, once it was approved and
	// runs (pending-approval before).
	heldRunning = "running"
)

// Task statuses of the extension.
const (
	taskWorking   = "working"
	taskCompleted = "completed"
	taskCancelled = "cancelled"
)

// taskResult is a CreateTaskResult (resultType "task") or a tasks/get result ("complete").
type taskResult struct {
	mcp.ResultBase
	ResultType     string          `json:"resultType"`
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage,omitempty"`
	CreatedAt      string          `json:"createdAt"`
	LastUpdatedAt  string          `json:"lastUpdatedAt"`
	TTLMs          *int64          `json:"ttlMs"`
	PollIntervalMs int64           `json:"pollIntervalMs"`
	Result         json.RawMessage `json:"result,omitempty"`
}

// ackResult is the empty acknowledgement of tasks/cancel and tasks/update.
type ackResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

// taskParams are the params of tasks/get, tasks/cancel and tasks/update.
type taskParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"` // tasks/update's inputResponses are ignored: a held call asks for none
}

// heldSlot is where the invoke tool leaves the task of a held call, for the middleware of a
// tools/call that declared the extension.
type heldSlot struct{ task *approval.Task }

type (
	heldSlotKey struct{}
)

// addTasks serves the extension on srv (NewServer's capabilities advertise it).
func (s *Server) addTasks(srv *mcp.Server) {
	srv.AddReceivingMiddleware(s.tasksMiddleware)
	for method, h := range map[string]func(context.Context, identity.ExecContext, *taskParams) (mcp.Result, error){
		"tasks/get":    s.getTask,
		"tasks/cancel": s.cancelTask,
		"tasks/update": s.updateTask,
	} {
		err := mcp.AddReceivingCustomMethod(srv, method, func(ctx context.Context, _ *mcp.ServerSession, p *taskParams) (mcp.Result, error) {
			ec, ok := identity.CallerOf(ctx)
			if !ok {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "no verified caller"}
			}
			if p == nil || p.TaskID == "" {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "missing required param taskId"}
			}
			return h(ctx, ec, p)
		})
		if err != nil { // only a standard method's name is refused: these are reserved to the extension
			panic(fmt.Sprintf("mcp tasks: %v", err))
		}
	}
}

// tasksMiddleware hands the tasks methods their verified caller, and answers a tools/call
// that declared the extension and was held with the held call's task instead of its result.
func (s *Server) tasksMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" || !declaresTasks(req.GetParams()) {
			return next(ctx, method, req)
		}
		slot := &heldSlot{}
		res, err := next(context.WithValue(ctx, heldSlotKey{}, slot), method, req)
		if err != nil || slot.task == nil {
			return res, err
		}
		t := taskOf(*slot.task, "task")
		left := max(time.Until(slot.task.ExpiresAt).Milliseconds(), 0) // ttlMs: the time left to the approval's expiry
		t.TTLMs = &left
		return t, nil
	}
}

// declaresTasks says the request's own client capabilities name the extension: only those
// of this request count (the extension forbids a task to a request that did not declare it).
func declaresTasks(p mcp.Params) bool {
	if p == nil {
		return false
	}
	caps, _ := p.GetMeta()[clientCapabilitiesMeta].(map[string]any)
	exts, _ := caps["extensions"].(map[string]any)
	_, ok := exts[TasksExtension].(map[string]any)
	return ok
}

// offerTask leaves the task of a held answer in the request's slot, if it has one.
func (s *Server) offerTask(ctx context.Context, ec identity.ExecContext, ans answer.Answer) {
	slot, ok := ctx.Value(heldSlotKey{}).(*heldSlot)
	if !ok {
		return
	}
	if t, err := s.heldTask(ctx, ec, ans); err == nil && t != nil && t.End == nil {
		slot.task = t // read back from the store: the task is durable before it is answered
	}
}

// heldTask is the task of a held call's answer (202 with its approvalId); nil for any other.
func (s *Server) heldTask(ctx context.Context, ec identity.ExecContext, ans answer.Answer) (*approval.Task, error) {
	if !ans.Held() || s.Approvals == nil {
		return nil, nil
	}
	var h gateway.Held
	if json.Unmarshal(ans.Body, &h) != nil || h.ApprovalID == "" {
		return nil, nil
	}
	t, err := s.Approvals.Task(ctx, ec, h.ApprovalID)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// replayNow is an idempotent retry's answer: a replayed hold answers where the held call
// stands now, and its final answer once it ended, so a client without the extension learns
// the outcome by retrying, and the call never runs twice.
func (s *Server) replayNow(ctx context.Context, ec identity.ExecContext, ans answer.Answer) answer.Answer {
	if !ans.Replayed {
		return ans
	}
	t, err := s.heldTask(ctx, ec, ans)
	var fe *fault.Error
	switch {
	case errors.As(err, &fe) && fe.Kind == fault.Unavailable:
		return errorAnswer(fe)
	case err != nil || t == nil:
		return ans
	case t.End != nil:
		return answer.Answer{Status: t.End.Status, Body: t.End.Body, Replayed: true}
	case !t.Waiting():
		var h gateway.Held
		_ = json.Unmarshal(ans.Body, &h) // heldTask decoded it
		h.Status, h.Message = heldRunning, "approved; the call is running"
		ans.Body, _ = json.Marshal(h) // strings encode
	}
	return ans
}

// getTask is tasks/get: the requester's task as it stands; -32602 for any other caller's,
// exactly as for an unknown id.
func (s *Server) getTask(ctx context.Context, ec identity.ExecContext, p *taskParams) (mcp.Result, error) {
	t, err := s.ownTask(ctx, ec, p.TaskID)
	if err != nil {
		return nil, err
	}
	return taskOf(t, "complete"), nil
}

// cancelTask is tasks/cancel: withdraws the requester's pending call (audited); one already
// running is not stopped, and the acknowledgement is the same.
func (s *Server) cancelTask(ctx context.Context, ec identity.ExecContext, p *taskParams) (mcp.Result, error) {
	if s.Approvals == nil {
		return nil, taskNotFound(p.TaskID)
	}
	if err := s.Approvals.Withdraw(ctx, ec, p.TaskID); err != nil {
		return nil, taskError(p.TaskID, err)
	}
	return &ackResult{ResultType: "complete"}, nil
}

// updateTask is tasks/update: a held call never asks its client for input, so responses
// are ignored (as for keys not outstanding) once the task is known to be the caller's.
func (s *Server) updateTask(ctx context.Context, ec identity.ExecContext, p *taskParams) (mcp.Result, error) {
	if _, err := s.ownTask(ctx, ec, p.TaskID); err != nil {
		return nil, err
	}
	return &ackResult{ResultType: "complete"}, nil
}

func (s *Server) ownTask(ctx context.Context, ec identity.ExecContext, id string) (approval.Task, error) {
	if s.Approvals == nil {
		return approval.Task{}, taskNotFound(id)
	}
	t, err := s.Approvals.Task(ctx, ec, id)
	if err != nil {
		return approval.Task{}, taskError(id, err)
	}
	return t, nil
}

// taskError is the JSON-RPC error of a task method: -32602 for an unknown task (and one
// that is not the caller's), -32603 when the store cannot tell (fail closed).
func taskError(id string, err error) error {
	var fe *fault.Error
	if errors.As(err, &fe) && fe.Kind == fault.NotFound {
		return taskNotFound(id)
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "Failed to retrieve task: " + faultOf(err).Message}
}

func taskNotFound(id string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("Failed to retrieve task: no task %q", id)}
}

// taskOf is the task's wire shape: working while it waits or runs; completed with the
// CallToolResult a synchronous invoke would have returned (isError for a run that failed,
// a rejection, an expiry); cancelled once its requester withdrew it.
func taskOf(t approval.Task, resultType string) *taskResult {
	r := &taskResult{ResultType: resultType, TaskID: t.ID, CreatedAt: t.CreatedAt.UTC().Format(time.RFC3339Nano),
		LastUpdatedAt: t.UpdatedAt.UTC().Format(time.RFC3339Nano), PollIntervalMs: TaskPollInterval.Milliseconds()}
	switch {
	case t.Status == store.ApprovalWithdrawn:
		r.Status, r.StatusMessage = taskCancelled, "withdrawn "+t.Withdrawn+"; the call never ran"
	case t.End != nil:
		r.Status, r.Result = taskCompleted, completeResult(answerResult(*t.End))
	case t.Waiting():
		ttl := t.ExpiresAt.Sub(t.CreatedAt).Milliseconds() // from creation, as the extension defines it
		r.Status, r.TTLMs = taskWorking, &ttl
		r.StatusMessage = "waiting for a person's approval until " + t.ExpiresAt.UTC().Format(time.RFC3339)
	default: // approved: running, kept past the approval's expiry
		r.Status, r.StatusMessage = taskWorking, "approved; the call is running"
	}
	return r
}

// completeResult is a CallToolResult as a result of the current protocol: resultType
// "complete", as the SDK sets it on a synchronous answer.
func completeResult(r *mcp.CallToolResult) json.RawMessage {
	raw, _ := json.Marshal(r) // a tool result encodes
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	m["resultType"] = json.RawMessage(`"complete"`)
	raw, _ = json.Marshal(m)
	return raw
}
