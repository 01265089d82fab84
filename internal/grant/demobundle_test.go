package grant

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/xemahq/xema/internal/manifest"
	"github.com/xemahq/xema/internal/store"
)

// TestDemoBundleData: bundles/demo/data.json, the data.xema `make bundle` builds the demo
// bundle from, is what the compiler makes of biomes/demo approved for the org "default" with
// its default profile (as `xema serve --dev-grant demo` does), at revision "demo".
// go test ./internal/grant -run TestDemoBundleData -update rewrites it.
func TestDemoBundleData(t *testing.T) {
	b, problems, err := manifest.LoadDir("../../biomes/demo")
	if err != nil || len(problems) > 0 {
		t.Fatalf("load biomes/demo: %v %v", err, problems)
	}
	var caps []store.Capability
	for _, c := range b.Contributions {
		caps = append(caps, store.Capability{Ref: c.Manifest.Ref, BiomeID: b.ID, BiomeVersion: b.Version,
			Manifest: mustJSON(t, c.Manifest), Lifecycle: store.LifecyclePublished})
	}
	data, err := Build(Input{Capabilities: caps,
		Grants:       []store.Grant{{ID: "g_demo", Org: "default", BiomeID: b.ID, BiomeVersion: b.Version, Profile: b.DefaultProfile, ApprovedAt: t0}},
		Biomes:       []store.BiomeVersion{{ID: b.ID, Version: b.Version, Manifest: mustJSON(t, b)}},
		Environments: DefaultEnvironments(), Profiles: Builtin(), Revision: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.MarshalIndent(data, "", "  ")
	got = append(got, '\n')
	const file = "../../bundles/demo/data.json"
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is out of date with biomes/demo (rerun with -update):\n%s", file, got)
	}
}
