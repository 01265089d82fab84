package admin_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/admin"
	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
)

// Org A is the fixture's default org; org B another org with nothing of its own.
const (
	orgA    = identity.DefaultOrg
	orgB    = "globex"
	noteRef = "note:add@1"
)

// world is what the cases' inputs name: org A's grant of the operator's ticketing biome, and
// notes, a biome of org A's own, submitted and not granted.
type world struct {
	f       *apptest.Fixture
	grantID string
	notes   *catalog.SubmitResult
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
	return world{f: f, grantID: gs[0].ID, notes: notes}
}

type outcome func(t *testing.T, w world, res *gateway.Result, err error)

// refused is an outcome of a typed error of kind and code.
func refused(kind fault.Kind, code string) outcome {
	return func(t *testing.T, _ world, res *gateway.Result, err error) {
		t.Helper()
		_ = apptest.Fault(t, res, err, kind, code)
	}
}

type biomeList struct {
	Biomes []catalog.BiomeView `json:"biomes"`
}

func listed(bs []catalog.BiomeView, id string) bool {
	return slices.ContainsFunc(bs, func(b catalog.BiomeView) bool { return b.BiomeID == id })
}

// cases are one valid call of each admin operation: ran checks org A's administrator's answer,
// writes says whether it changes the store, foreign checks org B's administrator's answer to
// the same input, which must tell nothing of org A's biome and grants.
var cases = []struct {
	name    string
	ref     string
	input   func(w world) any
	writes  bool
	ran     outcome
	foreign outcome
}{
	{
		name: "submit a version", ref: admin.RefSubmit, writes: true,
		input: func(w world) any { return w.f.Submission("notes", "1.1.0", noteRef) },
		ran: func(t *testing.T, _ world, res *gateway.Result, err error) {
			out := apptest.Output[catalog.SubmitResult](t, res, err)
			if out.BiomeID != "notes" || out.Version != "1.1.0" || !strings.HasPrefix(out.Digest.Hash, "sha256:") {
				t.Fatalf("submitted %+v", out)
			}
		},
		// The id is org A's: org B can neither read nor take it.
		foreign: refused(fault.Conflict, "BIOME_ID_TAKEN"),
	},
	{
		name: "install", ref: admin.RefInstall, writes: true,
		input: func(w world) any {
			return map[string]any{"biomeId": "notes", "version": "1.0.0", "digestHash": w.notes.Digest.Hash}
		},
		ran: func(t *testing.T, _ world, res *gateway.Result, err error) {
			g := apptest.Output[admin.GrantView](t, res, err)
			if g.GrantID == "" || g.BiomeID != "notes" || g.Status != catalog.GrantActive || g.ApprovedBy != "user:alice" {
				t.Fatalf("installed %+v", g)
			}
		},
		// Org A's own biome is answered to org B as a version that does not exist.
		foreign: refused(fault.Invalid, "UNKNOWN_BIOME_VERSION"),
	},
	{
		name: "install dry run", ref: admin.RefInstall,
		input: func(w world) any {
			return map[string]any{"biomeId": "notes", "version": "1.0.0", "digestHash": w.notes.Digest.Hash, "dryRun": true, "since": "1h"}
		},
		ran: func(t *testing.T, _ world, res *gateway.Result, err error) {
			v := apptest.Output[admin.DryRunView](t, res, err)
			if !v.DryRun || v.BiomeID != "notes" || v.Impact.Since == "" {
				t.Fatalf("dry run %+v", v)
			}
		},
		foreign: refused(fault.Invalid, "UNKNOWN_BIOME_VERSION"),
	},
	{
		name: "list biomes", ref: admin.RefBiomeList,
		input: func(world) any { return map[string]any{} },
		ran: func(t *testing.T, _ world, res *gateway.Result, err error) {
			out := apptest.Output[biomeList](t, res, err)
			if !listed(out.Biomes, "notes") || !listed(out.Biomes, "ticketing") {
				t.Fatalf("org A's biomes: %+v", out.Biomes)
			}
		},
		// The operator's biomes are everyone's; org A's own are not.
		foreign: func(t *testing.T, _ world, res *gateway.Result, err error) {
			out := apptest.Output[biomeList](t, res, err)
			if listed(out.Biomes, "notes") || !listed(out.Biomes, "ticketing") {
				t.Fatalf("org B's biomes: %+v", out.Biomes)
			}
		},
	},
	{
		name: "get a biome", ref: admin.RefBiomeGet,
		input: func(world) any { return map[string]any{"biomeId": "notes", "version": "1.0.0"} },
		ran: func(t *testing.T, w world, res *gateway.Result, err error) {
			b := apptest.Output[catalog.BiomeView](t, res, err)
			if b.BiomeID != "notes" || b.Version != "1.0.0" || b.Operator || !strings.Contains(string(b.Digest), w.notes.Digest.Hash) {
				t.Fatalf("biome %+v", b)
			}
		},
		foreign: refused(fault.NotFound, "UNKNOWN_BIOME"),
	},
	{
		name: "list grants", ref: admin.RefGrantList,
		input: func(world) any { return map[string]any{} },
		ran: func(t *testing.T, w world, res *gateway.Result, err error) {
			out := apptest.Output[struct{ Grants []admin.GrantView }](t, res, err)
			if len(out.Grants) != 1 || out.Grants[0].GrantID != w.grantID || out.Grants[0].Status != catalog.GrantActive {
				t.Fatalf("org A's grants: %+v", out.Grants)
			}
		},
		foreign: func(t *testing.T, _ world, res *gateway.Result, err error) {
			if out := apptest.Output[struct{ Grants []admin.GrantView }](t, res, err); len(out.Grants) != 0 {
				t.Fatalf("org B reads grants %+v", out.Grants)
			}
		},
	},
	{
		name: "revoke", ref: admin.RefGrantRevoke, writes: true,
		input: func(w world) any { return map[string]any{"grantId": w.grantID} },
		ran: func(t *testing.T, w world, res *gateway.Result, err error) {
			g := apptest.Output[admin.GrantView](t, res, err)
			if g.GrantID != w.grantID || g.Status != catalog.GrantRevoked || g.RevokedBy != "user:alice" || g.RevokedAt == "" {
				t.Fatalf("revoked %+v", g)
			}
		},
		foreign: refused(fault.NotFound, catalog.CodeGrantNotFound),
	},
	{
		name: "revoke dry run", ref: admin.RefGrantRevoke,
		input: func(w world) any { return map[string]any{"grantId": w.grantID, "dryRun": true} },
		ran: func(t *testing.T, w world, res *gateway.Result, err error) {
			v := apptest.Output[admin.RevokeDryRunView](t, res, err)
			if !v.DryRun || v.GrantID != w.grantID || v.Status != catalog.GrantActive || v.Impact.Since == "" {
				t.Fatalf("revoke dry run %+v", v)
			}
		},
		foreign: refused(fault.NotFound, catalog.CodeGrantNotFound),
	},
	{
		name: "change", ref: admin.RefGrantChange, writes: true,
		input: func(w world) any {
			return map[string]any{"grantId": w.grantID, "customize": map[string]any{"ticket:comment.add@1": map[string]any{"requiresApproval": true}}}
		},
		ran: func(t *testing.T, w world, res *gateway.Result, err error) {
			v := apptest.Output[admin.ChangeView](t, res, err)
			if v.DryRun || v.Grant.Status != catalog.GrantActive || v.Grant.Supersedes != w.grantID ||
				v.Replaces.GrantID != w.grantID || v.Replaces.Status != catalog.GrantSuperseded || len(v.Diff) == 0 {
				t.Fatalf("changed %+v", v)
			}
		},
		foreign: refused(fault.NotFound, catalog.CodeGrantNotFound),
	},
	{
		name: "change dry run", ref: admin.RefGrantChange,
		input: func(w world) any {
			return map[string]any{"grantId": w.grantID, "dryRun": true,
				"customize": map[string]any{"ticket:comment.add@1": map[string]any{"requiresApproval": true}}}
		},
		ran: func(t *testing.T, w world, res *gateway.Result, err error) {
			v := apptest.Output[admin.ChangeView](t, res, err)
			if !v.DryRun || v.Grant.Status != "proposed" || v.Replaces.Status != catalog.GrantActive || v.Impact == nil || len(v.Diff) == 0 {
				t.Fatalf("change dry run %+v", v)
			}
		},
		foreign: refused(fault.NotFound, catalog.CodeGrantNotFound),
	},
	{
		name: "lifecycle transition", ref: admin.RefLifecycle, writes: true,
		input: func(world) any { return map[string]any{"ref": noteRef, "to": "published"} },
		ran: func(t *testing.T, _ world, res *gateway.Result, err error) {
			tr := apptest.Output[catalog.Transition](t, res, err)
			if tr.Ref != noteRef || tr.To != "published" || tr.From != "seeded" {
				t.Fatalf("transition %+v", tr)
			}
		},
		foreign: refused(fault.NotFound, "UNKNOWN_CAPABILITY"),
	},
}

// TestAdminCallsAnswerTyped: each operation called by its org's administrator answers its
// typed view, and only the writes change the store.
func TestAdminCallsAnswerTyped(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			before := w.f.State(t)
			res, err := w.f.Call(t, apptest.Admin(orgA), c.ref, c.input(w))
			c.ran(t, w, res, err)
			if changed := w.f.State(t) != before; changed != c.writes {
				t.Fatalf("store changed: %v, want %v", changed, c.writes)
			}
		})
	}
}

// TestAdminOtherOrgSeesNothing: another org's administrator, naming org A's biome and grant,
// reads none of them and changes nothing.
func TestAdminOtherOrgSeesNothing(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			before := w.f.State(t)
			res, err := w.f.Call(t, apptest.Admin(orgB), c.ref, c.input(w))
			c.foreign(t, w, res, err)
			if w.f.State(t) != before {
				t.Fatal("org B's call changed the store")
			}
		})
	}
}

// TestAdminRefusesUnauthorized: the operations are for people administering the org: an
// agent and an org member are denied by the policy, and nothing changes.
func TestAdminRefusesUnauthorized(t *testing.T) {
	callers := map[string]identity.ExecContext{
		"agent":  apptest.Exec("agent:support-bot", "project", ""),
		"member": apptest.Exec("user:bob", "org", "org_member"),
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			before := w.f.State(t)
			for who, ec := range callers {
				res, err := w.f.Call(t, ec, c.ref, c.input(w))
				apptest.Denied(t, res, err)
				if w.f.State(t) != before {
					t.Fatalf("the %s's call changed the store", who)
				}
			}
		})
	}
}

// TestAdminBadInput: a bad input is answered with a typed error naming the field, whether the
// input schema, the handler (since without dryRun, a window too long) or the catalog finds
// it, and nothing changes.
func TestAdminBadInput(t *testing.T) {
	w := newWorld(t)
	bad := w.f.Submission("notes", "1.2.0", noteRef)
	bad.Contributions[0] = []byte(strings.Replace(string(bad.Contributions[0]), `"riskTier": "low"`, `"riskTier": "extreme"`, 1))
	install := func(extra map[string]any) map[string]any {
		in := map[string]any{"biomeId": "notes", "version": "1.0.0", "digestHash": w.notes.Digest.Hash}
		for k, v := range extra {
			in[k] = v
		}
		return in
	}
	for _, c := range []struct {
		name    string
		ref     string
		input   any
		kind    fault.Kind
		code    string
		pointer string
	}{
		{"submit without contributions", admin.RefSubmit, map[string]any{"manifest": map[string]any{}}, fault.Invalid, gateway.CodeInvalidInput, "/contributions"},
		{"submit a bad risk tier", admin.RefSubmit, bad, fault.Invalid, "INVALID_MANIFEST", "/contributions/0/manifest/riskTier"},
		{"install an unknown version", admin.RefInstall, install(map[string]any{"version": "9.9.9"}), fault.Invalid, "UNKNOWN_BIOME_VERSION", "/version"},
		{"install since without dryRun", admin.RefInstall, install(map[string]any{"since": "1h"}), fault.Invalid, fault.CodeInvalidArgument, "/since"},
		{"install a dry run too long", admin.RefInstall, install(map[string]any{"dryRun": true, "since": "9999h"}), fault.Invalid, fault.CodeInvalidArgument, "/since"},
		{"get a biome without version", admin.RefBiomeGet, map[string]any{"biomeId": "notes"}, fault.Invalid, gateway.CodeInvalidInput, "/version"},
		{"list grants of an empty id", admin.RefGrantList, map[string]any{"biomeId": ""}, fault.Invalid, gateway.CodeInvalidInput, "/biomeId"},
		{"revoke without grantId", admin.RefGrantRevoke, map[string]any{}, fault.Invalid, gateway.CodeInvalidInput, "/grantId"},
		{"revoke since without dryRun", admin.RefGrantRevoke, map[string]any{"grantId": w.grantID, "since": "1h"}, fault.Invalid, fault.CodeInvalidArgument, "/since"},
		{"revoke with an unknown field", admin.RefGrantRevoke, map[string]any{"grantId": w.grantID, "force": true}, fault.Invalid, gateway.CodeInvalidInput, "/force"},
		{"change since without dryRun", admin.RefGrantChange, map[string]any{"grantId": w.grantID, "since": "1h"}, fault.Invalid, fault.CodeInvalidArgument, "/since"},
		{"change to an unknown capability", admin.RefGrantChange, map[string]any{"grantId": w.grantID,
			"customize": map[string]any{"kb:page.read@1": map[string]any{"environments": []string{"project"}}}}, fault.Invalid, "UNKNOWN_CAPABILITY", "/customize/kb:page.read@1"},
		{"transition to an unknown state", admin.RefLifecycle, map[string]any{"ref": noteRef, "to": "gone"}, fault.Invalid, gateway.CodeInvalidInput, "/to"},
		{"transition a malformed ref", admin.RefLifecycle, map[string]any{"ref": "Note", "to": "deprecated"}, fault.Invalid, gateway.CodeInvalidInput, "/ref"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := w.f.State(t)
			res, err := w.f.Call(t, apptest.Admin(orgA), c.ref, c.input)
			if e := apptest.Fault(t, res, err, c.kind, c.code); !apptest.Names(e, c.pointer) {
				t.Fatalf("%s %q %+v names no %s", e.Code, e.Message, e.Violations, c.pointer)
			}
			if w.f.State(t) != before {
				t.Fatal("a bad input changed the store")
			}
		})
	}
}
