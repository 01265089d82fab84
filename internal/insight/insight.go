// Package insight registers, as kernel capabilities, what an org's administrators read about
// their gateway: the overview's figures counted from the audit log (audit:stats.get@1) and
// one capability with the org's grants that cover it (catalog:capability.get@1). Both are
// authorized by their humanBaseline and audited like every other operation.
package insight

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"
	"time"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/grant"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/store"
)

// Refs of the capabilities.
const (
	RefStats      = "audit:stats.get@1"
	RefCapability = "catalog:capability.get@1"
)

//go:embed contributions/*.json
var descriptors embed.FS

// Contributions are the capabilities' descriptors (the OpenAPI document's bodies).
var Contributions fs.FS = descriptors

// Store is what the overview and coverage read (store.Store).
type Store interface {
	AuditStats(ctx context.Context, q store.AuditStatsQuery) (store.AuditStats, error)
	ApprovalsWaiting(ctx context.Context, org string, now time.Time) (int64, time.Time, error)
	ListGrants(ctx context.Context) ([]store.Grant, error)
}

// Service answers both capabilities.
type Service struct {
	Store   Store
	Catalog *catalog.Catalog
	// Revision is the serving policy's revision.
	Revision func() string
	// Covering returns the grants of org that cover ref in the serving policy data.
	Covering func(org, ref string) []grant.GrantData
	// OperationReads are the gateway's own read operations: people's allowed calls of them
	// (their console page loads) are not counted, as GET /v1/audit?omit=people-reads leaves
	// them out.
	OperationReads func(org string) []string
	Now            func() time.Time
}

// Register queues the capabilities on reg.
func Register(reg *kernel.Registry, s *Service) error {
	return reg.RegisterFiles(descriptors, map[string]kernel.Handler{
		"contributions/audit-stats.json": func(ctx context.Context, call kernel.Call) (any, error) {
			var in struct {
				Window string `json:"window"`
			}
			if err := json.Unmarshal(call.Input, &in); err != nil {
				return nil, fmt.Errorf("decode validated input: %w", err)
			}
			return s.Overview(ctx, call.Exec.Org, in.Window)
		},
		"contributions/capability-get.json": func(ctx context.Context, call kernel.Call) (any, error) {
			var in struct {
				Ref string `json:"ref"`
			}
			if err := json.Unmarshal(call.Input, &in); err != nil {
				return nil, fmt.Errorf("decode validated input: %w", err)
			}
			return s.Capability(ctx, call.Exec.Org, in.Ref)
		},
	})
}

// window is one of the overview's windows and the width of its chart's buckets.
type window struct{ span, bucket time.Duration }

// Windows are the overview's windows by name: 60, 96 and 168 buckets.
var Windows = map[string]window{
	"1h":  {time.Hour, time.Minute},
	"24h": {24 * time.Hour, 15 * time.Minute},
	"7d":  {7 * 24 * time.Hour, time.Hour},
}

// OmitPeopleReads is the audit search's omit= value the overview's counts match.
const OmitPeopleReads = "people-reads"

// TopN is how many refs and denial reasons the overview names.
const TopN = 10

// classOf is the overview's outcome of a call's decision: a call refused before the policy
// decided (input invalid, ref unknown, a dependency unavailable) failed.
func classOf(decision string) string {
	switch decision {
	case audit.DecisionAllowed:
		return "allowed"
	case audit.DecisionDenied:
		return "denied"
	case audit.DecisionPendingApproval:
		return "held"
	}
	return "failed"
}

// callDecisions are the decisions of a call's own record.
var callDecisions = []string{audit.DecisionAllowed, audit.DecisionDenied, audit.DecisionPendingApproval,
	audit.DecisionInvalid, audit.DecisionNotFound, audit.DecisionError}

// Overview is the answer of audit:stats.get@1.
type Overview struct {
	Window string `json:"window"`
	Since  string `json:"since"`
	Until  string `json:"until"`
	// Omit is the audit search's omit= these counts match (GET /v1/audit?omit=people-reads).
	Omit          string     `json:"omit"`
	BucketSeconds int64      `json:"bucketSeconds"`
	Series        []Bucket   `json:"series"`
	Totals        Totals     `json:"totals"`
	TopReasons    []Reason   `json:"topDenialReasons"`
	TopRefs       []RefCount `json:"topRefs"`
	Held          Held       `json:"held"`
	Runners       []Runner   `json:"runners"`
	Policy        Policy     `json:"policy"`
	// Uncounted is how many of the org's records in the window the rollups have not caught
	// up with beyond what this answer read past them: 0 but just after a start over a large log.
	Uncounted int64 `json:"uncounted"`
}

// Bucket is one time bucket of the chart.
type Bucket struct {
	Start   string `json:"start"`
	Allowed int64  `json:"allowed"`
	Denied  int64  `json:"denied"`
	Held    int64  `json:"held"`
	Failed  int64  `json:"failed"`
}

// Totals sums the series.
type Totals struct {
	Calls   int64 `json:"calls"`
	Allowed int64 `json:"allowed"`
	Denied  int64 `json:"denied"`
	Held    int64 `json:"held"`
	Failed  int64 `json:"failed"`
}

// Reason is a denial reason code and the denied records naming it.
type Reason struct {
	Code  string `json:"code"`
	Count int64  `json:"count"`
}

// RefCount is a ref and its calls.
type RefCount struct {
	Ref   string `json:"ref"`
	Count int64  `json:"count"`
}

// Held is the org's calls waiting for a person now.
type Held struct {
	Waiting     int64  `json:"waiting"`
	OldestSince string `json:"oldestSince,omitempty"`
}

// Runner sums the runs of one runner kind.
type Runner struct {
	Runner       string  `json:"runner"`
	Runs         int64   `json:"runs"`
	Errors       int64   `json:"errors"`
	AvgLatencyMs float64 `json:"avgLatencyMs"`
	MaxLatencyMs float64 `json:"maxLatencyMs"`
}

// Policy is the serving revision and, when the window saw another before it, when it changed.
type Policy struct {
	Revision  string     `json:"revision"`
	ChangedAt string     `json:"changedAt,omitempty"`
	Previous  string     `json:"previous,omitempty"`
	Seen      []Revision `json:"seen"`
}

// Revision is a revision the window's records were decided under.
type Revision struct {
	Revision string `json:"revision"`
	First    string `json:"first"`
	Last     string `json:"last"`
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Overview counts org's calls of the window ending now.
func (s *Service) Overview(ctx context.Context, org, name string) (Overview, error) {
	w, ok := Windows[name]
	if !ok {
		return Overview{}, fault.New(fault.Invalid, fault.CodeInvalidArgument, "/window: %q is not one of 1h, 24h, 7d", name)
	}
	// The window ends with the bucket in progress: whole buckets are what the rollups hold.
	until := s.Now().UTC().Truncate(w.bucket).Add(w.bucket)
	since := until.Add(-w.span)
	st, err := s.Store.AuditStats(ctx, store.AuditStatsQuery{Org: org, Since: since, Until: until, Bucket: w.bucket, Top: TopN,
		Calls: callDecisions, Omit: &store.AuditOmit{SubjectKind: "user", Refs: s.OperationReads(org)}})
	if err != nil {
		return Overview{}, unavailable("audit log", err)
	}
	n := int(w.span / w.bucket)
	out := Overview{Window: name, Since: stamp(since), Until: stamp(until), Omit: OmitPeopleReads, BucketSeconds: int64(w.bucket / time.Second),
		Series: make([]Bucket, n), TopReasons: []Reason{}, TopRefs: []RefCount{}, Runners: []Runner{}}
	for i := range out.Series {
		out.Series[i].Start = stamp(since.Add(time.Duration(i) * w.bucket))
	}
	for _, b := range st.Series {
		if b.Bucket < 0 || b.Bucket >= int64(n) {
			continue // the store answers [since, until) only; a bucket outside would be a bug
		}
		p := &out.Series[b.Bucket]
		switch classOf(b.Decision) {
		case "allowed":
			p.Allowed += b.Count
			out.Totals.Allowed += b.Count
		case "denied":
			p.Denied += b.Count
			out.Totals.Denied += b.Count
		case "held":
			p.Held += b.Count
			out.Totals.Held += b.Count
		default:
			p.Failed += b.Count
			out.Totals.Failed += b.Count
		}
		out.Totals.Calls += b.Count
	}
	for _, r := range st.Reasons {
		out.TopReasons = append(out.TopReasons, Reason{Code: r.Key, Count: r.Count})
	}
	for _, r := range st.Refs {
		out.TopRefs = append(out.TopRefs, RefCount{Ref: r.Key, Count: r.Count})
	}
	for _, r := range st.Runners {
		out.Runners = append(out.Runners, Runner{Runner: r.Runner, Runs: r.Runs, Errors: r.Errors,
			AvgLatencyMs: float64(r.LatencySumMicros/r.Runs) / 1000, MaxLatencyMs: float64(r.LatencyMaxMicros) / 1000})
	}
	waiting, oldest, err := s.Store.ApprovalsWaiting(ctx, org, until)
	if err != nil {
		return Overview{}, unavailable("approval store", err)
	}
	out.Held.Waiting = waiting
	if waiting > 0 {
		out.Held.OldestSince = stamp(oldest)
	}
	out.Policy = policyOf(s.Revision(), st.Revisions)
	out.Uncounted = st.Uncounted
	return out, nil
}

// policyOf names the serving revision and, when the window's records show an earlier one
// before its first record, the change.
func policyOf(current string, spans []store.RevisionSpan) Policy {
	p := Policy{Revision: current, Seen: []Revision{}}
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].First.Before(spans[j].First) })
	var cur *store.RevisionSpan
	for i := range spans {
		p.Seen = append(p.Seen, Revision{Revision: spans[i].Revision, First: stamp(spans[i].First), Last: stamp(spans[i].Last)})
		if spans[i].Revision == current {
			cur = &spans[i]
		}
	}
	if cur == nil {
		return p
	}
	var prev *store.RevisionSpan
	for i := range spans {
		if spans[i].Revision != current && spans[i].First.Before(cur.First) && (prev == nil || spans[i].Last.After(prev.Last)) {
			prev = &spans[i]
		}
	}
	if prev != nil {
		p.ChangedAt, p.Previous = stamp(cur.First), prev.Revision
	}
	return p
}

func unavailable(what string, err error) error {
	e := fault.Wrap(err, fault.Unavailable, fault.CodeStoreUnavailable, "%s unavailable; nothing was counted", what)
	e.NotRun = true // a read that failed did nothing: a retry under its key may read
	return e
}

// CapabilityView is the answer of catalog:capability.get@1.
type CapabilityView struct {
	Ref        string          `json:"ref"`
	Manifest   json.RawMessage `json:"manifest"`
	Lifecycle  string          `json:"lifecycle"`
	ReplacedBy string          `json:"replacedBy,omitempty"`
	Biome      BiomeRef        `json:"biome"`
	RunnerKind string          `json:"runnerKind"`
	Grants     []Coverage      `json:"grants"`
}

// BiomeRef is the biome version serving a capability for the org.
type BiomeRef struct {
	ID      string `json:"id"`
	Version string `json:"version"`
	BuiltIn bool   `json:"builtIn,omitempty"`
}

// Coverage is one grant of the org covering the capability, as the serving policy reads it.
type Coverage struct {
	GrantID          string          `json:"grantId"`
	Biome            string          `json:"biomeId"`
	BiomeVersion     string          `json:"biomeVersion"`
	Profile          string          `json:"profile"`
	ApprovedBy       string          `json:"approvedBy,omitempty"`
	ApprovedAt       string          `json:"approvedAt,omitempty"`
	Subjects         []string        `json:"subjects"` // nil: every subject of the org
	Environments     []string        `json:"environments"`
	Resources        []string        `json:"resources"` // nil: any resource
	Audience         []string        `json:"audience"`  // nil: the environment's audience
	RateLimit        grant.LimitData `json:"rateLimit"`
	Quota            grant.LimitData `json:"quota"`
	RequiresApproval bool            `json:"requiresApproval"`
}

// Capability reads ref in org's catalog; a ref org cannot see is answered as unknown.
func (s *Service) Capability(ctx context.Context, org, ref string) (CapabilityView, error) {
	e, ok := s.Catalog.Snapshot().For(org, ref)
	if !ok {
		return CapabilityView{}, fault.New(fault.NotFound, "UNKNOWN_CAPABILITY", "no capability %s", ref)
	}
	c := e.Capability
	v := CapabilityView{Ref: c.Ref, Manifest: c.Manifest, Lifecycle: c.Lifecycle, ReplacedBy: c.ReplacedBy,
		Biome:      BiomeRef{ID: c.BiomeID, Version: c.BiomeVersion, BuiltIn: c.BiomeID == catalog.BuiltinBiome && c.RunnerKind == "kernel"},
		RunnerKind: c.RunnerKind, Grants: []Coverage{}}
	covering := s.Covering(org, ref)
	if len(covering) == 0 {
		return v, nil
	}
	recorded, err := s.Store.ListGrants(ctx)
	if err != nil {
		return CapabilityView{}, unavailable("grant store", err)
	}
	byID := make(map[string]store.Grant, len(recorded))
	for _, g := range recorded {
		byID[g.ID] = g
	}
	for _, g := range covering {
		cv := Coverage{GrantID: g.GrantID, BiomeVersion: g.BiomeVersion, Profile: g.Profile,
			Subjects: keys(g.Subjects), Environments: keys(g.Environments), Resources: g.Resources, Audience: keys(g.Audience),
			RateLimit: g.RateLimit, Quota: g.Quota, RequiresApproval: g.RequiresApproval}
		if r, ok := byID[g.GrantID]; ok {
			cv.Biome, cv.ApprovedBy, cv.ApprovedAt = r.BiomeID, r.ApprovedBy, stamp(r.ApprovedAt)
		}
		v.Grants = append(v.Grants, cv)
	}
	return v, nil
}

func keys(s grant.Set) []string {
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s))
	for k := range s {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
