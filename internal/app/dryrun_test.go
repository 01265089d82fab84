package app

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/store"
)

// demoApp is a gateway with the demo biome granted to the default org, and that grant.
func demoApp(t *testing.T) (*App, []store.Grant) {
	t.Helper()
	a, err := New(context.Background(), Config{DataDir: t.TempDir(), BiomesDir: repoBiomes(t), DevGrants: []string{"demo"}, OperatorOrg: identity.DefaultOrg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	mine, err := a.Publisher.Grants(context.Background(), identity.DefaultOrg, "demo")
	if err != nil || len(mine) != 1 {
		t.Fatalf("the demo's dev grant: %v %v", mine, err)
	}
	return a, mine
}

// TestGrantDryRunReplaysOnlyItsOrg: a grant's dry run replays the calls of the grant's org
// only. Another org calls more, under subjects of its own, and its grant was revoked, so
// each of its calls would be a change if replayed: its volume, subjects and audit ids never
// appear in the impact.
func TestGrantDryRunReplaysOnlyItsOrg(t *testing.T) {
	ctx := context.Background()
	a, mine := demoApp(t)
	req, _ := json.Marshal(map[string]string{"biomeId": "demo", "version": mine[0].BiomeVersion, "digestHash": mine[0].DigestHash})
	theirs, err := a.Publisher.Install(ctx, req, "acme", "user:acme-admin")
	if err != nil {
		t.Fatal(err)
	}
	call := func(org, subject string) string {
		t.Helper()
		ec := identity.ExecContext{Subject: identity.Subject{Kind: "agent", Ref: subject}, Environment: "project", Org: org, Armed: []string{"*"}}
		res, err := a.Gateway.Invoke(ctx, ec, gateway.Request{Ref: "kb:page.read@1", Input: json.RawMessage(`{"pageId":"welcome"}`)})
		if err != nil || res.Denial != nil {
			t.Fatalf("%s's call: %+v %v", subject, res, err)
		}
		return res.AuditID
	}
	var myCalls, theirCalls []string
	for range 2 {
		myCalls = append(myCalls, call(identity.DefaultOrg, "agent:mine"))
	}
	for i := range 5 {
		theirCalls = append(theirCalls, call("acme", fmt.Sprintf("agent:acme-%d", i)))
	}
	if _, err := a.Publisher.Revoke(ctx, "acme", theirs.ID, "user:acme-admin"); err != nil {
		t.Fatal(err)
	}

	_, imp, err := a.Publisher.RevokeDryRun(ctx, identity.DefaultOrg, mine[0].ID, "user:root", time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if imp.Considered != len(myCalls) || imp.AllowToDeny != len(myCalls) || len(imp.Losing) != 1 ||
		imp.Losing[0].Subject != "agent:mine" || len(imp.Recent) != len(myCalls) {
		t.Errorf("impact %+v; want this org's %d calls of agent:mine only", imp, len(myCalls))
	}
	raw, _ := json.Marshal(imp)
	var leaked []string
	for _, s := range append(theirCalls, "agent:acme-") {
		if strings.Contains(string(raw), s) {
			leaked = append(leaked, s)
		}
	}
	if len(leaked) > 0 {
		t.Errorf("the impact shows another org's %v: %s", leaked, raw)
	}
}

// TestGrantDryRunCountsHeldCalls: a grant that would require approval for a capability counts
// the calls of it that ran without one as would-now-be-held, not as denied; calls that were
// held already, and other capabilities' calls, are not counted.
func TestGrantDryRunCountsHeldCalls(t *testing.T) {
	ctx := context.Background()
	a, mine := demoApp(t)
	ec := identity.ExecContext{Subject: identity.Subject{Kind: "agent", Ref: "agent:bot"}, Environment: "project",
		Org: identity.DefaultOrg, Armed: []string{"*"}}
	for i, c := range []struct{ ref, input string }{
		{"workflow:run.start@1", `{"workflowId":"onboarding"}`},
		{"workflow:run.start@1", `{"workflowId":"offboarding"}`},
		{"kb:page.read@1", `{"pageId":"welcome"}`},
		{"kb:page.publish@1", `{"pageId":"faq","title":"FAQ","body":"Ask."}`}, // held already
	} {
		res, err := a.Gateway.Invoke(ctx, ec, gateway.Request{Ref: c.ref, Input: json.RawMessage(c.input)})
		if err != nil || res.Denial != nil || (i == 3) != (res.Held != nil) {
			t.Fatalf("call %d (%s): %+v %v", i, c.ref, res, err)
		}
	}
	req, _ := json.Marshal(map[string]any{"biomeId": "demo", "version": mine[0].BiomeVersion, "digestHash": mine[0].DigestHash,
		"customize": map[string]any{"workflow:run.start@1": map[string]any{"requiresApproval": true}}})
	_, imp, err := a.Publisher.DryRun(ctx, req, identity.DefaultOrg, "user:root", time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if imp.Considered != 4 || imp.AllowToHeld != 2 || imp.AllowToDeny != 0 || imp.DenyToAllow != 0 {
		t.Fatalf("impact %+v; want 4 considered, the 2 workflow starts now held, nothing denied", imp)
	}
}
