package insight_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/insight"
)

// Org A is the fixture's default org; org B another org with nothing of its own.
const (
	orgA       = identity.DefaultOrg
	orgB       = "globex"
	commentRef = "ticket:comment.add@1"
	noteRef    = "note:add@1"
)

// world is org A's gateway after an agent's calls: two comments that ran and one refused as
// invalid input; org A also holds a granted biome of its own, notes.
type world struct {
	f       *apptest.Fixture
	grantID string // org A's ticketing grant
}

func newWorld(t *testing.T) world {
	t.Helper()
	f := apptest.New(t, apptest.Options{})
	ctx := context.Background()
	gs, err := f.App.Publisher.Grants(ctx, orgA, "")
	if err != nil || len(gs) != 1 {
		t.Fatalf("the fixture's grants: %v %v", gs, err)
	}
	notes, err := f.App.Publisher.Submit(ctx, f.Submission("notes", "1.0.0", noteRef), orgA)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(map[string]any{"biomeId": notes.BiomeID, "version": notes.Version, "digestHash": notes.Digest.Hash})
	if _, err := f.App.Publisher.Install(ctx, req, orgA, "user:alice"); err != nil {
		t.Fatal(err)
	}
	bot := apptest.Exec("agent:support-bot", "project", "")
	for _, in := range []map[string]any{
		{"ticketId": "3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88", "text": "hi"},
		{"ticketId": "3f1c2a9e-8b4d-4c57-9a61-2b7e0f4d5c88", "text": "again"},
		{"ticketId": "not-a-uuid"},
	} {
		if _, err := f.Call(t, bot, commentRef, in); err != nil && fault.Of(err).Kind != fault.Invalid {
			t.Fatal(err)
		}
	}
	// The overview's window ends with the clock's bucket: move the clock past the calls.
	*f.Now = time.Now()
	return world{f: f, grantID: gs[0].ID}
}

type outcome func(t *testing.T, w world, res *gateway.Result, err error)

// cases are one valid call of each capability: ran checks org A's administrator's answer,
// foreign org B's administrator's answer to the same input, which must tell nothing of org
// A's calls, grants and own biome.
var cases = []struct {
	name    string
	ref     string
	input   any
	ran     outcome
	foreign outcome
}{
	{
		name: "stats", ref: insight.RefStats, input: map[string]any{"window": "1h"},
		ran: func(t *testing.T, _ world, res *gateway.Result, err error) {
			o := apptest.Output[insight.Overview](t, res, err)
			want := insight.Totals{Calls: 3, Allowed: 2, Failed: 1}
			if o.Window != "1h" || o.BucketSeconds != 60 || len(o.Series) != 60 || o.Totals != want || o.Omit != insight.OmitPeopleReads {
				t.Fatalf("overview %s %ds %d buckets, totals %+v", o.Window, o.BucketSeconds, len(o.Series), o.Totals)
			}
			if len(o.TopRefs) != 1 || o.TopRefs[0].Ref != commentRef {
				t.Fatalf("top refs %+v", o.TopRefs)
			}
		},
		foreign: func(t *testing.T, _ world, res *gateway.Result, err error) {
			o := apptest.Output[insight.Overview](t, res, err)
			if o.Totals != (insight.Totals{}) || len(o.TopRefs) != 0 || len(o.Runners) != 0 {
				t.Fatalf("org B counts org A's calls: %+v %+v %+v", o.Totals, o.TopRefs, o.Runners)
			}
		},
	},
	{
		name: "an operator's capability", ref: insight.RefCapability, input: map[string]any{"ref": commentRef},
		ran: func(t *testing.T, w world, res *gateway.Result, err error) {
			v := apptest.Output[insight.CapabilityView](t, res, err)
			if v.Ref != commentRef || v.Biome.ID != "ticketing" || v.Biome.BuiltIn || v.RunnerKind != "http" {
				t.Fatalf("capability %+v", v)
			}
			if len(v.Grants) != 1 || v.Grants[0].GrantID != w.grantID || v.Grants[0].Biome != "ticketing" || v.Grants[0].ApprovedBy != "user:root" {
				t.Fatalf("coverage %+v", v.Grants)
			}
		},
		// Every org sees the operator's capability; none sees another org's grant of it.
		foreign: func(t *testing.T, _ world, res *gateway.Result, err error) {
			if v := apptest.Output[insight.CapabilityView](t, res, err); v.Ref != commentRef || len(v.Grants) != 0 {
				t.Fatalf("org B reads %+v", v)
			}
		},
	},
	{
		name: "the org's own capability", ref: insight.RefCapability, input: map[string]any{"ref": noteRef},
		ran: func(t *testing.T, _ world, res *gateway.Result, err error) {
			v := apptest.Output[insight.CapabilityView](t, res, err)
			if v.Biome.ID != "notes" || len(v.Grants) != 1 || v.Grants[0].ApprovedBy != "user:alice" {
				t.Fatalf("capability %+v", v)
			}
		},
		foreign: func(t *testing.T, _ world, res *gateway.Result, err error) {
			_ = apptest.Fault(t, res, err, fault.NotFound, gateway.CodeUnknownCapability)
		},
	},
	{
		name: "a built-in capability", ref: insight.RefCapability, input: map[string]any{"ref": insight.RefStats},
		ran:     builtIn,
		foreign: builtIn,
	},
}

// builtIn checks the answer for the gateway's own audit:stats.get@1: built in, held by its
// humanBaseline, covered by no grant.
func builtIn(t *testing.T, _ world, res *gateway.Result, err error) {
	t.Helper()
	v := apptest.Output[insight.CapabilityView](t, res, err)
	if v.Ref != insight.RefStats || !v.Biome.BuiltIn || v.RunnerKind != "kernel" || len(v.Grants) != 0 {
		t.Fatalf("built-in capability %+v", v)
	}
}

// TestInsightAnswersTyped: org A's administrator reads the overview of org A's calls and a
// capability with org A's grants covering it, and reading changes nothing.
func TestInsightAnswersTyped(t *testing.T) {
	w := newWorld(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := w.f.State(t)
			res, err := w.f.Call(t, apptest.Admin(orgA), c.ref, c.input)
			c.ran(t, w, res, err)
			if w.f.State(t) != before {
				t.Fatal("a read changed the store")
			}
		})
	}
}

// TestInsightOtherOrgSeesNothing: org B's administrator counts none of org A's calls and
// reads none of its grants or own capabilities.
func TestInsightOtherOrgSeesNothing(t *testing.T) {
	w := newWorld(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := w.f.Call(t, apptest.Admin(orgB), c.ref, c.input)
			c.foreign(t, w, res, err)
		})
	}
}

// TestInsightRefusesUnauthorized: what administrators read is denied to an agent and to an
// org member.
func TestInsightRefusesUnauthorized(t *testing.T) {
	w := newWorld(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, ec := range []identity.ExecContext{
				apptest.Exec("agent:support-bot", "project", ""),
				apptest.Exec("user:bob", "org", "org_member"),
			} {
				res, err := w.f.Call(t, ec, c.ref, c.input)
				apptest.Denied(t, res, err)
			}
		})
	}
}

// TestInsightBadInput: a bad input is answered with a typed error naming the field, and
// nothing changes.
func TestInsightBadInput(t *testing.T) {
	w := newWorld(t)
	for _, c := range []struct {
		name    string
		ref     string
		input   any
		pointer string
	}{
		{"stats without a window", insight.RefStats, map[string]any{}, "/window"},
		{"stats of an unknown window", insight.RefStats, map[string]any{"window": "2h"}, "/window"},
		{"stats with an unknown field", insight.RefStats, map[string]any{"window": "1h", "org": orgB}, "/org"},
		{"a capability of an empty ref", insight.RefCapability, map[string]any{"ref": ""}, "/ref"},
		{"a capability with an unknown field", insight.RefCapability, map[string]any{"ref": commentRef, "org": orgB}, "/org"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := w.f.State(t)
			res, err := w.f.Call(t, apptest.Admin(orgA), c.ref, c.input)
			if e := apptest.Fault(t, res, err, fault.Invalid, gateway.CodeInvalidInput); !apptest.Names(e, c.pointer) {
				t.Fatalf("%q %+v names no %s", e.Message, e.Violations, c.pointer)
			}
			if w.f.State(t) != before {
				t.Fatal("a bad input changed the store")
			}
		})
	}
}

// TestOverviewNamesTheWindow: the service itself, behind the schema's enum, refuses an unknown
// window naming it.
func TestOverviewNamesTheWindow(t *testing.T) {
	svc := &insight.Service{Now: time.Now}
	_, err := svc.Overview(context.Background(), orgA, "2h")
	if e := apptest.Fault(t, nil, err, fault.Invalid, fault.CodeInvalidArgument); !apptest.Names(e, "/window") {
		t.Fatalf("%q names no /window", e.Message)
	}
}
