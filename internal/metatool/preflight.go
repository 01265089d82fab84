package metatool

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/store"
)

// PreflightRequest is `{ref}`.
type PreflightRequest struct {
	Ref string `json:"ref"`
}

// Requirement is one condition a call needs; Met says whether it holds now.
type Requirement struct {
	Kind   string `json:"kind"` // grant | runner | lifecycle | binding | approval
	Detail string `json:"detail"`
	Met    bool   `json:"met"`
}

// Blocker is a requirement that does not hold, with the denial code it would produce.
type Blocker struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// PreflightResult is `{ready, requirements, blockers}`.
type PreflightResult struct {
	Ready        bool          `json:"ready"`
	Requirements []Requirement `json:"requirements"`
	Blockers     []Blocker     `json:"blockers"`
}

// Preflight checks, without running anything, whether a call to ref could succeed now.
func (m *Tools) Preflight(ctx context.Context, ec identity.ExecContext, req PreflightRequest) (*PreflightResult, error) {
	e, d, err := m.decide(ctx, ec, req.Ref)
	if err != nil {
		return nil, err
	}
	res := &PreflightResult{Requirements: []Requirement{}, Blockers: []Blocker{}}
	add := func(kind, detail string, met bool, code string) {
		res.Requirements = append(res.Requirements, Requirement{Kind: kind, Detail: detail, Met: met})
		if !met {
			res.Blockers = append(res.Blockers, Blocker{Code: code, Detail: detail})
		}
	}
	lifecycleOK := e.Capability.Lifecycle == store.LifecyclePublished || e.Capability.Lifecycle == store.LifecycleDeprecated
	add("lifecycle", fmt.Sprintf("%s is %s", e.Ref(), e.Capability.Lifecycle), lifecycleOK, "NOT_PUBLISHED")
	_, runErr := m.d.Runners.Resolve(ctx, ec, e)
	runnerCode, runnerDetail := gateway.CodeNoRunner, "a runner serves "+e.Ref()
	var re *fault.Error
	if errors.As(runErr, &re) {
		runnerCode, runnerDetail = re.Code, re.Message // e.g. MISSING_BINDING, MISSING_CREDENTIAL
	}
	add("runner", runnerDetail, runErr == nil, runnerCode)
	grantDetail := "the policy admits this caller in " + ec.Environment
	if !d.Allow {
		codes := make([]string, 0, len(d.Reasons))
		for _, r := range d.Reasons {
			codes = append(codes, r.Code)
		}
		grantDetail = fmt.Sprintf("the policy denies this caller in %s (%s)", ec.Environment, strings.Join(codes, ", "))
	}
	add("grant", grantDetail, d.Allow, gateway.CodeDenied)
	for _, r := range d.Reasons {
		res.Blockers = append(res.Blockers, Blocker{Code: r.Code, Detail: r.Detail})
	}
	for _, o := range d.Obligations {
		if o.Kind == gateway.ObligationApproval {
			res.Requirements = append(res.Requirements, Requirement{Kind: "approval", Detail: "each call waits for a human approval", Met: true})
		}
	}
	res.Ready = len(res.Blockers) == 0
	return res, nil
}
