package approval

// This file: listing held calls a page at a time, and reading one as its requester.

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/store"
)

// listInput is the input of approval:list@1.
type listInput struct {
	ApprovalID string `json:"approvalId"`
	Status     string `json:"status"`
	Biome      string `json:"biome"`
	Ref        string `json:"ref"`
	Requester  string `json:"requester"`
	Cursor     string `json:"cursor"`
	Limit      int    `json:"limit"`
}

// DefaultPage is how many held calls a page lists when the caller names no limit (the
// input schema allows 1 to 100).
const DefaultPage = 50

// Page is the output of approval:list@1: a page of held calls, newest first, and the cursor
// of the next page while there is one.
type Page struct {
	Approvals  []View `json:"approvals"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// list serves approval:list@1 to the org's members. Each view says whether the viewer may
// decide the call and, if not, why. An org administrator sees the whole queue; another
// member only the calls they may decide, so a page is filled from as many reads as it takes
// (at most memberScans), and the cursor stays a place in the queue's order.
func (s *Service) list(ctx context.Context, call kernel.Call) (any, error) {
	var in listInput
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return nil, fmt.Errorf("decode validated input: %w", err)
	}
	after, err := decodeCursor(in.Cursor)
	if err != nil {
		return nil, err
	}
	limit := cmp.Or(in.Limit, DefaultPage)
	wholeQueue := call.Exec.OrgAdmin()
	page := Page{Approvals: make([]View, 0, limit)}
	status := in.Status
	if !wholeQueue { // a member sees only calls still to decide: read no others
		if status != "" && status != store.ApprovalPending {
			return page, nil
		}
		status = store.ApprovalPending
	}
	judged := map[string]policy.Decision{}
	for scan := 1; ; scan++ {
		var as []store.Approval
		if in.ApprovalID != "" {
			a, err := s.Store.GetApproval(ctx, in.ApprovalID)
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				return nil, unavailable(err)
			case a.Org == call.Exec.Org:
				as = []store.Approval{a}
			}
		} else if as, err = s.Store.ListApprovals(ctx, store.ApprovalFilter{Org: call.Exec.Org, Status: status, Biome: in.Biome,
			Ref: in.Ref, RequesterRef: in.Requester, Limit: limit + 1, After: after}); err != nil {
			return nil, unavailable(err)
		}
		more := len(as) > limit
		if more {
			as = as[:limit]
		}
		for i, a := range as {
			why, err := s.whyNot(ctx, call.Exec, a, judged)
			if err != nil {
				return nil, err
			}
			if why != nil && !wholeQueue {
				continue
			}
			v := view(a, false)
			v.SideEffects = s.sideEffects(a)
			can := why == nil
			v.CanDecide, v.WhyNot = &can, why
			page.Approvals = append(page.Approvals, v)
			if len(page.Approvals) == limit {
				if more || i < len(as)-1 {
					page.NextCursor = encodeCursor(a)
				}
				return page, nil
			}
		}
		if !more || in.ApprovalID != "" {
			return page, nil
		}
		last := as[len(as)-1]
		if scan == memberScans {
			page.NextCursor = encodeCursor(last) // a short page: the rest of the queue lies past here
			return page, nil
		}
		after = &store.ApprovalKey{CreatedAt: last.CreatedAt, ID: last.ID}
	}
}

// memberScans bounds the reads of the queue one page of a member's listing takes.
const memberScans = 5

// CodeInvalidCursor answers a cursor the gateway did not write.
const CodeInvalidCursor = "INVALID_CURSOR"

// encodeCursor is the opaque place of a in the list's order. It only says where a page
// starts: the org and filters are always the caller's own.
func encodeCursor(a store.Approval) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(a.CreatedAt.UnixMicro(), 10) + "." + a.ID))
}

func decodeCursor(c string) (*store.ApprovalKey, error) {
	if c == "" {
		return nil, nil
	}
	bad := fault.New(fault.Invalid, CodeInvalidCursor, "cursor is not one the gateway wrote; pass nextCursor of the previous page as it was")
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, bad
	}
	at, id, ok := strings.Cut(string(raw), ".")
	micros, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || micros < 0 || !strings.HasPrefix(id, "apr_") {
		return nil, bad
	}
	return &store.ApprovalKey{CreatedAt: time.UnixMicro(micros).UTC(), ID: id}, nil
}

// Invocation is GET /v1/invocations/{id}: a held call's status, with its output once it has
// run. Its requester may read it in the context it was held in (environment and armed set),
// and so may whoever the policy admits to approval:list@1 and would see it there: an org
// administrator, or another member who may decide it. Anyone else learns nothing, as for an
// unknown id. An output is read only where the caller's own call could receive it
// (AUDIENCE_INCOMPATIBLE otherwise).
func (s *Service) Invocation(ctx context.Context, ec identity.ExecContext, id string) (View, error) {
	notFound := fault.New(fault.NotFound, CodeNotFound, "no invocation %q", id)
	a, err := s.Store.GetApproval(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && a.Org != ec.Org {
		return View{}, notFound
	}
	if err != nil {
		e := fault.New(fault.Unavailable, fault.CodeStoreUnavailable, "store unavailable; nothing was read (fail closed)")
		e.NotRun = true // a read that failed did nothing: a retry under its key may read
		return View{}, e
	}
	requester := a.RequesterRef == ec.Subject.Ref
	if !requester || !heldIn(a, ec) {
		in := gateway.PolicyInput(ec, RefList, "")
		d, err := s.Policy.Decide(ctx, in)
		if err != nil || !d.Allow {
			return View{}, notFound
		}
		// approval:list@1 admits every member; a member who is no administrator reads only
		// the calls the listing shows them (pending, theirs to decide) and the ones they
		// decided: once a call is decided, its input and output are not every approver's.
		if !ec.OrgAdmin() && (requester || a.DecidedBy != ec.Subject.Ref) {
			if why, err := s.whyNot(ctx, ec, a, nil); err != nil || why != nil {
				return View{}, notFound
			}
		}
	}
	if ran(a) {
		if err := s.audience(ctx, ec, a); err != nil {
			return View{}, err
		}
	}
	return view(a, true), nil
}
