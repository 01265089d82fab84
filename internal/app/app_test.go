package app

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/fault"
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
