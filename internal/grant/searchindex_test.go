package grant

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"testing"
)

// TestSearchIndex: refs share a group exactly when the fields search reads are equal,
// across biomes; a field a document omits stays absent (unlike null); a group is filed under
// its grant's subject keys; refs without a grant under their catalog biome, or without a
// catalog entry, have none.
func TestSearchIndex(t *testing.T) {
	descriptor := func(biome string, over map[string]any) map[string]any {
		c := map[string]any{"biome": map[string]any{"id": biome, "version": "1.0.0"}, "lifecycle": "published",
			"safeForAgents": true, "riskTier": "low"}
		maps.Copy(c, over)
		return c
	}
	grantOf := func(over map[string]any) map[string]any {
		g := map[string]any{"grantId": "g", "org": "acme", "biomeVersion": "1.0.0", "subjects": map[string]any{"agent:a": true, "group:g": false}}
		maps.Copy(g, over)
		return g
	}
	caps := map[string]map[string]any{
		"kb:a@1":       descriptor("kb", nil),
		"hr:a@1":       descriptor("hr", map[string]any{"riskTier": "high"}), // a field search does not read
		"kb:unsafe@1":  descriptor("kb", map[string]any{"safeForAgents": false}),
		"kb:absent@1":  descriptor("kb", nil),
		"kb:nulled@1":  descriptor("kb", nil),
		"kb:pinned@1":  descriptor("kb", nil),
		"kb:elswhr@1":  descriptor("kb", nil),
		"kb:nobiome@1": {"lifecycle": "published"},
	}
	delete(caps["kb:absent@1"], "safeForAgents")
	caps["kb:nulled@1"]["safeForAgents"] = nil
	grants := map[string]map[string]map[string]map[string]any{
		"kb:a@1":       {"kb": {"acme": grantOf(map[string]any{"grantId": "g1"})}},
		"hr:a@1":       {"hr": {"acme": grantOf(map[string]any{"grantId": "g2", "resources": []any{"x"}}), "globex": grantOf(map[string]any{"org": "globex", "subjects": nil})}},
		"kb:unsafe@1":  {"kb": {"acme": grantOf(nil)}},
		"kb:absent@1":  {"kb": {"acme": grantOf(nil)}},
		"kb:nulled@1":  {"kb": {"acme": grantOf(nil)}},
		"kb:pinned@1":  {"kb": {"acme": grantOf(map[string]any{"biomeVersion": "0.9.0"})}},
		"kb:elswhr@1":  {"other": {"acme": grantOf(nil)}},
		"kb:nobiome@1": {"kb": {"acme": grantOf(nil)}},
		"kb:nocat@1":   {"kb": {"acme": grantOf(nil)}},
	}
	versions := map[string]map[string]any{"kb:pinned@1": {"0.9.0": descriptor("kb", map[string]any{"riskTier": "high"}), "0.8.0": descriptor("kb", nil)}}
	groupedTo, groups := searchIndex(grants, caps, versions)

	wantRefs := map[string][]string{ // id → refs
		"hr:a@1": {"hr:a@1", "kb:a@1"}, "kb:unsafe@1": {"kb:unsafe@1"}, "kb:absent@1": {"kb:absent@1"},
		"kb:nulled@1": {"kb:nulled@1"}, "kb:pinned@1": {"kb:pinned@1"},
	}
	got := map[string][]string{}
	for id, g := range groups["acme"] {
		got[id] = slices.Sorted(maps.Keys(g.Refs))
	}
	if !reflect.DeepEqual(got, wantRefs) {
		t.Errorf("acme's groups %v, want %v", got, wantRefs)
	}
	if g := groups["acme"]["kb:absent@1"]; g.Catalog["safeForAgents"] != nil || len(g.Catalog) != 1 {
		t.Errorf("a descriptor without safeForAgents is grouped as %v", g.Catalog)
	}
	if g := groups["acme"]["kb:pinned@1"]; len(g.Versions) != 1 || g.Versions["0.9.0"] == nil || g.Grant["biomeVersion"] != "0.9.0" {
		t.Errorf("the pinned version is grouped as %v under %v", g.Versions, g.Grant)
	}
	if g := groups["acme"]["hr:a@1"]; g.Grant["grantId"] != nil || g.Grant["resources"] != nil || g.Catalog["riskTier"] != nil {
		t.Errorf("a group copies fields search does not read: %v, %v", g.Catalog, g.Grant)
	}
	wantKeys := map[string]map[string][]string{
		"acme":   {"agent:a": {"hr:a@1", "kb:absent@1", "kb:nulled@1", "kb:pinned@1", "kb:unsafe@1"}, "group:g": {"hr:a@1", "kb:absent@1", "kb:nulled@1", "kb:pinned@1", "kb:unsafe@1"}},
		"globex": {SubjectsNull: {"hr:a@1"}},
	}
	if !reflect.DeepEqual(groupedTo, wantKeys) {
		t.Errorf("groupedTo %v, want %v", groupedTo, wantKeys)
	}
}

// TestSearchIndexOfTypedData: Build's groups (from the typed document) are those WithIndex
// makes of the document's encoding, so tests over hand-written data group as production.
func TestSearchIndexOfTypedData(t *testing.T) {
	data, err := Build(goldenInput(t))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "groupedTo")
	delete(doc, "searchGroups")
	indexed, err := WithIndex(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]any{{data.GroupedTo, indexed["groupedTo"]}, {data.SearchGroups, indexed["searchGroups"]}} {
		typed, _ := json.Marshal(pair[0])
		untyped, _ := json.Marshal(pair[1])
		if string(typed) != string(untyped) {
			t.Errorf("Build indexes\n%s\nWithIndex\n%s", typed, untyped)
		}
	}
	if len(data.SearchGroups["acme"]) == 0 {
		t.Fatal("the golden input has no search group: the check checks nothing")
	}
}
