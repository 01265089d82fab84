package storetest

import (
	"context"
	"testing"

	"github.com/xemahq/xema/internal/store"
)

func mcpServer(id string, gen int64, tools ...store.MCPTool) store.MCPServer {
	return store.MCPServer{ProviderID: id, Transport: "stdio", Command: "/bin/srv", Args: []string{"stdio", "-v"},
		TimeoutMs: 5000, Tools: tools, Generation: gen, RegisteredBy: "user:admin", RegisteredAt: t0, SyncedAt: t0}
}

func mcpCapability(ref string) store.Capability {
	c := capability(ref, store.LifecycleSeeded)
	c.Invocation, c.RunnerKind = nil, "mcp-external"
	return c
}

// testFederation: registration lands whole or not at all; a sync moves the lifecycle,
// publishes the new version and updates the server in one transaction, compare-and-set on
// the generation.
func testFederation(t *testing.T, s store.Store) {
	ctx := context.Background()
	echo := store.MCPTool{Ref: "ev:echo@1", Name: "echo", Pin: "sha256:1"}
	add := store.MCPTool{Ref: "ev:add@1", Name: "add", Pin: "sha256:2"}
	v1 := biome("ev", "1.0.1", "h1")
	srv := mcpServer("ev", 1, echo, add)
	if err := s.SaveMCPServer(ctx, srv, v1, []store.Capability{mcpCapability("ev:echo@1"), mcpCapability("ev:add@1")}, nil); err != nil {
		t.Fatalf("SaveMCPServer gen 1: %v", err)
	}
	got, err := s.GetMCPServer(ctx, "ev")
	if err != nil {
		t.Fatalf("GetMCPServer: %v", err)
	}
	equal(t, "server round trip", got, srv)
	if caps, _ := s.ListCapabilities(ctx); len(caps) != 2 || caps[0].RunnerKind != "mcp-external" {
		t.Fatalf("capabilities after registration: %+v", caps)
	}

	// Registering the same provider again is refused and leaves no second biome version.
	err = s.SaveMCPServer(ctx, mcpServer("ev", 1), biome("ev", "1.0.9", "h9"), nil, nil)
	wantErr(t, "second registration", err, store.ErrConflict)
	if _, err := s.GetBiomeVersion(ctx, "ev", "1.0.9"); err == nil {
		t.Fatal("refused registration left its biome version behind")
	}

	// A failing registration (a ref another biome owns) leaves no server record.
	mustPublish(t, s, biome("other", "1.0.0", "ho"), capability("ot:x@1", store.LifecyclePublished))
	err = s.SaveMCPServer(ctx, mcpServer("ot", 1), biome("ot", "1.0.1", "hot"), []store.Capability{mcpCapability("ot:x@1")}, nil)
	wantErr(t, "registration over a foreign ref", err, store.ErrConflict)
	if _, err := s.GetMCPServer(ctx, "ot"); err == nil {
		t.Fatal("failed registration left a server record")
	}

	if err := s.TransitionLifecycle(ctx, store.LifecycleEvent{Ref: "ev:echo@1", From: store.LifecycleSeeded, To: store.LifecyclePublished, Actor: "user:admin"}); err != nil {
		t.Fatal(err)
	}
	changed := echo
	changed.Pin = "sha256:3"
	back := store.LifecycleEvent{Ref: "ev:echo@1", From: store.LifecyclePublished, To: store.LifecycleSeeded, Actor: "sync"}
	retire := store.LifecycleEvent{Ref: "ev:add@1", From: store.LifecycleSeeded, To: store.LifecycleRetired, Actor: "sync"}

	// A stale generation is refused and takes its transitions back.
	rev := revision(t, s)
	err = s.SaveMCPServer(ctx, mcpServer("ev", 3, changed), biome("ev", "1.0.3", "h3"), []store.Capability{mcpCapability("ev:echo@1")}, []store.LifecycleEvent{back, retire})
	wantErr(t, "stale generation", err, store.ErrConflict)
	if c, _ := s.GetCapability(ctx, "ev:echo@1"); c.Lifecycle != store.LifecyclePublished {
		t.Fatalf("refused sync moved ev:echo@1 to %s", c.Lifecycle)
	}
	if r := revision(t, s); r != rev {
		t.Fatalf("refused sync moved the revision from %d to %d", rev, r)
	}

	srv2 := mcpServer("ev", 2, changed)
	if err := s.SaveMCPServer(ctx, srv2, biome("ev", "1.0.2", "h2"), []store.Capability{mcpCapability("ev:echo@1")}, []store.LifecycleEvent{back, retire}); err != nil {
		t.Fatalf("SaveMCPServer gen 2: %v", err)
	}
	for ref, want := range map[string]string{"ev:echo@1": store.LifecycleSeeded, "ev:add@1": store.LifecycleRetired} {
		c, err := s.GetCapability(ctx, ref)
		if err != nil || c.Lifecycle != want {
			t.Fatalf("%s after sync: %+v, %v; want %s", ref, c, err, want)
		}
	}
	if c, _ := s.GetCapability(ctx, "ev:echo@1"); c.BiomeVersion != "1.0.2" {
		t.Fatalf("ev:echo@1 biome version %s, want 1.0.2", c.BiomeVersion)
	}
	if r := revision(t, s); r <= rev {
		t.Fatalf("sync did not move the revision (%d)", r)
	}
	list, err := s.ListMCPServers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv2.RegisteredAt = t0
	equal(t, "servers", list, []store.MCPServer{srv2})
	_, err = s.GetMCPServer(ctx, "nope")
	wantErr(t, "unknown server", err, store.ErrNotFound)
}
