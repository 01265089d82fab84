// Package replay re-decides recorded calls with a candidate policy and reports what would
// change: a platform team's "what would this break?" before a policy or grant change. It
// reads the audit log (the policy input each decision record keeps) and never writes.
package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/store"
)

// Decider is the candidate policy.
type Decider interface {
	Decide(ctx context.Context, in policy.Input) (policy.Decision, error)
}

// Window selects the recorded calls to replay.
type Window struct {
	Since, Until time.Time
	Org          string // "" is every org
	// Limit stops the replay after this many decisions (0: no limit); the report says so.
	Limit int
}

// Side is one decision of a call: allowed or not, and its reason codes.
type Side struct {
	Allow   bool     `json:"allow"`
	Reasons []string `json:"reasons"`
	// Held: allowed once a person approves the call (a recorded call was held).
	Held bool `json:"held,omitempty"`
}

// Change is one recorded call the candidate decides otherwise. Revision is the policy
// revision that decided it when it was recorded.
type Change struct {
	AuditID string `json:"auditId"`
	Ref     string `json:"ref"`
	Subject string `json:"subject"`
	// OnBehalfOf is the person a delegated call was made for (Subject being its actor).
	OnBehalfOf  string `json:"onBehalfOf,omitempty"`
	Environment string `json:"environment"`
	Time        string `json:"time"`
	Revision    string `json:"revision"`
	Before      Side   `json:"before"`
	After       Side   `json:"after"`
}

// RevisionCount is how many of the decisions replayed one recorded policy revision made, and
// how many of those the candidate decides otherwise.
type RevisionCount struct {
	Revision   string `json:"revision"`
	Considered int    `json:"considered"`
	Changed    int    `json:"changed"`
}

// Report is the outcome of a replay. Considered counts the decisions re-evaluated;
// NotReplayable the decision records written before the policy input was kept (never
// guessed).
type Report struct {
	// Candidate is the candidate policy's revision (a Decider with a Revision method).
	Candidate   string `json:"candidateRevision,omitempty"`
	Considered  int    `json:"considered"`
	AllowToDeny int    `json:"allowToDeny"`
	DenyToAllow int    `json:"denyToAllow"`
	// AllowToHeld counts calls that ran without a person's approval and would now be held.
	AllowToHeld   int `json:"allowToHeld"`
	NotReplayable int `json:"notReplayable"`
	// Truncated is true when Window.Limit stopped the replay before the window's end.
	Truncated bool `json:"truncated,omitempty"`
	// PrunedBefore is set when the window reaches before the audit retention's boundary:
	// the calls recorded before it were pruned and are not replayed.
	PrunedBefore string `json:"prunedBefore,omitempty"`
	// Revisions are the recorded revisions of the decisions replayed, oldest first: a policy
	// change shows as calls decided under another revision.
	Revisions []RevisionCount `json:"revisions"`
	Changes   []Change        `json:"changes"`
}

// revisioned is a Decider that names its revision (policy.Engine).
type revisioned interface{ Revision() string }

// count adds one decision recorded under rev (changed or not) to the report's revisions.
func (rep *Report) count(rev string, changed bool) {
	i := slices.IndexFunc(rep.Revisions, func(c RevisionCount) bool { return c.Revision == rev })
	if i < 0 {
		rep.Revisions = append(rep.Revisions, RevisionCount{Revision: rev})
		i = len(rep.Revisions) - 1
	}
	rep.Revisions[i].Considered++
	if changed {
		rep.Revisions[i].Changed++
	}
}

// errLimit stops a scan at Window.Limit.
var errLimit = errors.New("replay limit reached")

// Store is the audit log as a replay reads it (store.Store).
type Store interface {
	PruneBoundary(ctx context.Context) (store.PruneBoundary, error)
	ScanAudit(ctx context.Context, f store.AuditFilter, fn func(store.AuditRecord) error) error
}

// Run replays every decision record of the window with d. A call whose allow and reason codes
// are both unchanged is not a change; one whose reasons alone change is listed with equal
// allow flags.
func Run(ctx context.Context, st Store, d Decider, w Window) (*Report, error) {
	rep := &Report{Changes: []Change{}, Revisions: []RevisionCount{}}
	if r, ok := d.(revisioned); ok {
		rep.Candidate = r.Revision()
	}
	pruned, err := st.PruneBoundary(ctx)
	if err != nil {
		return nil, err
	}
	if !pruned.Before.IsZero() && (w.Since.IsZero() || w.Since.Before(pruned.Before)) {
		rep.PrunedBefore = pruned.Before.UTC().Format(time.RFC3339)
	}
	err = st.ScanAudit(ctx, store.AuditFilter{Since: w.Since, Until: w.Until, Org: w.Org}, func(r store.AuditRecord) error {
		if !decisionRecord(r) {
			return nil
		}
		if len(r.PolicyInput) == 0 {
			rep.NotReplayable++
			return nil
		}
		if w.Limit > 0 && rep.Considered >= w.Limit {
			rep.Truncated = true
			return errLimit
		}
		var in policy.Input
		if err := json.Unmarshal(r.PolicyInput, &in); err != nil {
			return fmt.Errorf("audit record %s: policy input: %w", r.ID, err)
		}
		before, err := recorded(r)
		if err != nil {
			return err
		}
		dec, err := d.Decide(ctx, in)
		if err != nil {
			return fmt.Errorf("replay %s: %w", r.ID, err)
		}
		rep.Considered++
		after := Side{Allow: dec.Allow, Reasons: codes(dec.Reasons), Held: dec.Held()}
		if r.ParentID != "" {
			// A call following another (an approved call's run, a joined or replayed one) was
			// covered by that call's hold, or lack of one: it is never held by itself.
			after.Held = before.Held
		}
		changed := before.Allow != after.Allow || before.Held != after.Held || !slices.Equal(before.Reasons, after.Reasons)
		rep.count(r.BundleRevision, changed)
		if !changed {
			return nil
		}
		switch {
		case before.Allow && !after.Allow:
			rep.AllowToDeny++
		case !before.Allow && after.Allow:
			rep.DenyToAllow++
		case before.Allow && !before.Held && after.Held:
			rep.AllowToHeld++
		}
		c := Change{AuditID: r.ID, Ref: r.Ref, Subject: r.SubjectRef,
			Environment: r.Environment, Time: r.Time.UTC().Format(time.RFC3339Nano), Revision: r.BundleRevision,
			Before: before, After: after}
		if d := audit.DelegationOf(r); d != nil {
			c.OnBehalfOf = d.Person.Ref
		}
		rep.Changes = append(rep.Changes, c)
		return nil
	})
	if err != nil && !errors.Is(err, errLimit) {
		return nil, err
	}
	return rep, nil
}

// decisionRecord reports whether r records a decision of the policy on a call: not an
// outcome, an approval step, an unauthenticated attempt or an unknown ref.
func decisionRecord(r store.AuditRecord) bool {
	switch {
	case strings.HasSuffix(r.ID, ".outcome"), r.ParentID != "" && len(r.PolicyInput) == 0,
		r.Decision == audit.DecisionUnauthenticated, r.Decision == audit.DecisionNotFound:
		return false
	}
	return true
}

// recorded is the decision the record keeps: the policy's reasons (a policy that allowed
// keeps none, whatever happened to the call after).
func recorded(r store.AuditRecord) (Side, error) {
	var reasons []policy.Reason
	if len(r.Reasons) > 0 {
		if err := json.Unmarshal(r.Reasons, &reasons); err != nil {
			return Side{}, fmt.Errorf("audit record %s: reasons: %w", r.ID, err)
		}
	}
	return Side{Allow: len(reasons) == 0, Reasons: codes(reasons), Held: r.Decision == audit.DecisionPendingApproval}, nil
}

func codes(rs []policy.Reason) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Code)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
