package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/admin"
	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/gateway"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/store"
)

func repoBiomes(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "biomes")
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A biome that fails validation at start-up is reported and skipped as a whole; the others
// load, and the demo's development grant publishes its capabilities.
func TestStartupSkipsInvalidBiomeWhole(t *testing.T) {
	ctx := context.Background()
	biomes := t.TempDir()
	if err := os.CopyFS(filepath.Join(biomes, "demo"), os.DirFS(filepath.Join(repoBiomes(t), "demo"))); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(biomes, "broken", "biome.json"), `{"id":"broken","version":"1.0.0",
		"requiresCapabilities":["broken:a.read@1","broken:b.read@1"],
		"permissionHints":[{"capability":"broken:a.read@1","reason":"r"},{"capability":"broken:b.read@1","reason":"r"}],
		"defaultProfile":"internal-agent"}`)
	write(t, filepath.Join(biomes, "broken", "contributions", "a.capability.contribution.json"), `{"kind":"capability","manifest":{
		"ref":"broken:a.read@1","title":"A","summary":"s","sideEffects":"none","inputSchema":{"type":"object"},
		"outputSchema":{"type":"object"},"riskTier":"low","requiresApproval":false},
		"invocation":{"kind":"http","url":"http://127.0.0.1:9/a","timeoutMs":1000}}`)
	write(t, filepath.Join(biomes, "broken", "contributions", "b.capability.contribution.json"), `{"kind":"capability","manifest":{"ref":"broken:b.read@1"`)

	a, err := New(ctx, Config{DataDir: t.TempDir(), BiomesDir: biomes, DevGrants: []string{"demo"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Store.GetCapability(ctx, "broken:a.read@1"); err == nil {
		t.Fatal("the valid half of an invalid biome was registered")
	}
	read, err := a.Store.GetCapability(ctx, "kb:page.read@1")
	if err != nil || read.Lifecycle != store.LifecyclePublished {
		t.Fatalf("demo capability %+v, %v: want published by the dev grant", read, err)
	}
	if _, err := a.Store.GetCapability(ctx, "biome:install@1"); err != nil {
		t.Fatalf("kernel capability not published: %v", err)
	}
	if a.Policy.Revision() == "" {
		t.Fatal("no policy bundle loaded")
	}
}

// The demo's in-process runners are served only where the demo biome is loaded.
func TestDemoRunnersOnlyWithTheDemoBiome(t *testing.T) {
	ctx := context.Background()
	bare, err := New(ctx, Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if _, ok := bare.Kernel.Handler("kb:page.read@1"); ok {
		t.Fatal("a gateway without the demo biome serves the demo's page reader")
	}
	withDemo, err := New(ctx, Config{DataDir: t.TempDir(), BiomesDir: repoBiomes(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer withDemo.Close()
	if _, ok := withDemo.Kernel.Handler("kb:page.read@1"); !ok {
		t.Fatal("the demo biome is loaded but its page reader is not served")
	}
}

// One grant dry run at a time: a second while one runs is refused, typed, at once.
func TestGrantDryRunsOneAtATime(t *testing.T) {
	a, err := New(context.Background(), Config{DataDir: t.TempDir(), OperatorOrg: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.dryRuns <- struct{}{} // a dry run is running
	_, err = a.grantImpact(context.Background(), store.Grant{Org: "default"}, time.Now().Add(-time.Hour))
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Kind != fault.Unavailable || fe.Code != "DRY_RUN_BUSY" {
		t.Fatalf("a second dry run: %v, want 503 DRY_RUN_BUSY", err)
	}
}

// TestBusyDryRunReleasesItsKey: a grant dry run refused DRY_RUN_BUSY did nothing, so its
// idempotency key is released and a retry under it (as the answer advises) runs, rather than
// replaying the 503 for the key's day.
func TestBusyDryRunReleasesItsKey(t *testing.T) {
	ctx := context.Background()
	a, err := New(ctx, Config{DataDir: t.TempDir(), BiomesDir: repoBiomes(t), DevGrants: []string{"demo"}, OperatorOrg: identity.DefaultOrg})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	gs, err := a.Publisher.Grants(ctx, identity.DefaultOrg, "demo")
	if err != nil || len(gs) != 1 {
		t.Fatalf("the demo's dev grant: %v %v", gs, err)
	}
	alice := identity.ExecContext{Subject: identity.Subject{Kind: "user", Ref: "user:alice"}, Environment: "org",
		OrgRole: "org_admin", Org: identity.DefaultOrg, Armed: []string{"*"}}
	req := gateway.Request{Ref: admin.RefGrantRevoke, Input: json.RawMessage(fmt.Sprintf(`{"grantId":%q,"dryRun":true}`, gs[0].ID))}

	a.dryRuns <- struct{}{} // another dry run is running
	busy, err := a.Idempotency.Invoke(ctx, alice, req, "dry-run-key")
	<-a.dryRuns
	if err != nil || busy.Status != http.StatusServiceUnavailable || !strings.Contains(string(busy.Body), catalog.CodeDryRunBusy) {
		t.Fatalf("a dry run while another runs: %d %s %v; want 503 %s", busy.Status, busy.Body, err, catalog.CodeDryRunBusy)
	}
	retry, err := a.Idempotency.Invoke(ctx, alice, req, "dry-run-key")
	if err != nil || !retry.Ran() || retry.Replayed || !strings.Contains(string(retry.Body), `"dryRun":true`) {
		t.Fatalf("the retry under the key: %d %s replayed=%v %v; want the dry run run", retry.Status, retry.Body, retry.Replayed, err)
	}
}

// TestCloseWaitsForTheLoops: Close stops every background loop and returns only once each
// has ended, so none of them uses the store after it is closed: a loop that reads the store
// once stopped has read it, successfully, by the time Close returns.
func TestCloseWaitsForTheLoops(t *testing.T) {
	a, err := New(context.Background(), Config{DataDir: t.TempDir(), BiomesDir: repoBiomes(t), DevGrants: []string{"demo"},
		ReloadEvery: time.Hour, PolicyDirPoll: time.Hour, MCPResyncEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a.runLoops() // nothing but Close stops them
	ended := make(chan error, 1)
	a.goLoop(func(ctx context.Context) {
		<-ctx.Done()
		runtime.Gosched()
		_, err := a.Store.ChainHeads(context.Background())
		ended <- err
	})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("the loop used the store after it closed: %v", err)
		}
	default:
		t.Fatal("Close returned while a loop still ran")
	}
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for _, loop := range []string{"app.(*App).Maintain", "app.(*App).Watch", "app.(*App).RollUpAudit", "spool.(*Spool).Run",
		"notify.(*Deliverer).Run", "app.(*App).PruneAudit", "unauth.(*Aggregator).Run"} {
		if strings.Contains(stacks, loop) {
			t.Errorf("%s still runs after Close", loop)
		}
	}
}
