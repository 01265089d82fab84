package grant

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// compileDemo compiles the demo biome's catalog with the given grants.
func compileDemo(t testing.TB, grants ...store.Grant) map[string]any {
	t.Helper()
	b := demoBiome("1.0.0")
	data, err := Compile(Input{
		Capabilities: catalog(t, b), Grants: grants, Biomes: []store.BiomeVersion{storedVersion(t, b)},
		Environments: DefaultEnvironments(), Profiles: Builtin(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func demoGrant(t testing.TB, id, profile string, at time.Time, customize string) store.Grant {
	g := store.Grant{ID: id, Org: "acme", BiomeID: "demo", BiomeVersion: "1.0.0", Profile: profile, ApprovedBy: "user:admin", ApprovedAt: at}
	if customize != "" {
		g.Customize = json.RawMessage(customize)
	}
	return g
}

// assertJSON compares the JSON encoding of got with want (any formatting).
func assertJSON(t *testing.T, what string, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad want: %v", what, err)
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Errorf("%s =\n%s\nwant\n%s", what, gb, wb)
	}
}

func TestCompileGrants(t *testing.T) {
	const roaEnvs = `{"app":true,"project":true,"sandbox":true,"session":true,"trusted-dev":true}`
	const iaEnvs = `{"app":true,"org":true,"project":true,"sandbox":true,"session":true,"trusted-dev":true}`
	tests := []struct {
		name   string
		grants []store.Grant
		want   string // data.xema.grants
	}{
		{"profile only: read-only-assistant covers the low read and nothing else",
			[]store.Grant{demoGrant(t, "g_1", "read-only-assistant", t0, "")},
			`{"kb:page.read@1":{"demo":{"acme":{"grantId":"g_1","org":"acme","biomeVersion":"1.0.0","profile":"read-only-assistant",
			  "environments":` + roaEnvs + `,"subjects":null,"resources":null,"audience":null,"requiresApproval":false,
			  "rateLimit":{"requests":120,"per":"1m"},"quota":{"requests":10000,"per":"24h"}}}}}`},
		{"customized subjects on one ref, profile defaults on the other",
			[]store.Grant{demoGrant(t, "g_2", "internal-agent", t0,
				`{"kb:page.write@1":{"subjects":["agent:bot","group:support"],"resources":["kb/pages/*"],"audience":["internal"]}}`)},
			`{"kb:page.read@1":{"demo":{"acme":{"grantId":"g_2","org":"acme","biomeVersion":"1.0.0","profile":"internal-agent",
			  "environments":` + iaEnvs + `,"subjects":null,"resources":null,"audience":null,"requiresApproval":false,
			  "rateLimit":{"requests":300,"per":"1m"},"quota":{"requests":20000,"per":"24h"}}}},
			 "kb:page.write@1":{"demo":{"acme":{"grantId":"g_2","org":"acme","biomeVersion":"1.0.0","profile":"internal-agent",
			  "environments":` + iaEnvs + `,"subjects":{"agent:bot":true,"group:support":true},"resources":["kb/pages/*"],
			  "audience":{"internal":true},"requiresApproval":false,
			  "rateLimit":{"requests":300,"per":"1m"},"quota":{"requests":20000,"per":"24h"}}}}}`},
		{"per-ref environments and limits; naming a ref grants it beyond the profile",
			[]store.Grant{demoGrant(t, "g_3", "read-only-assistant", t0,
				`{"kb:page.read@1":{"environments":["public-session"]},
				  "kb:admin.purge@1":{"environments":["org"],"rateLimit":{"requests":1,"per":"1h"},"quota":{"requests":5,"per":"24h"}}}`)},
			`{"kb:page.read@1":{"demo":{"acme":{"grantId":"g_3","org":"acme","biomeVersion":"1.0.0","profile":"read-only-assistant",
			  "environments":{"public-session":true},"subjects":null,"resources":null,"audience":null,"requiresApproval":false,
			  "rateLimit":{"requests":120,"per":"1m"},"quota":{"requests":10000,"per":"24h"}}}},
			 "kb:admin.purge@1":{"demo":{"acme":{"grantId":"g_3","org":"acme","biomeVersion":"1.0.0","profile":"read-only-assistant",
			  "environments":{"org":true},"subjects":null,"resources":null,"audience":null,"requiresApproval":true,
			  "rateLimit":{"requests":1,"per":"1h"},"quota":{"requests":5,"per":"24h"}}}}}`},
		{"customization lifts the profile's approval but not the capability's own",
			[]store.Grant{demoGrant(t, "g_4", "unrestricted", t0,
				`{"kb:page.write@1":{"requiresApproval":true},"kb:admin.purge@1":{"requiresApproval":false}}`)},
			``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := compileDemo(t, tt.grants...)["grants"].(map[string]any)
			if tt.want != "" {
				assertJSON(t, "grants", got, tt.want)
				return
			}
			approval := func(ref string) any {
				return got[ref].(map[string]any)["demo"].(map[string]any)["acme"].(map[string]any)["requiresApproval"]
			}
			for ref, want := range map[string]bool{"kb:page.read@1": false, "kb:page.write@1": true, "kb:admin.purge@1": true, "biome:install@1": false} {
				if approval(ref) != want {
					t.Errorf("%s requiresApproval = %v, want %v", ref, approval(ref), want)
				}
			}
		})
	}
}

func TestCompileProfileApproval(t *testing.T) {
	got := compileDemo(t, demoGrant(t, "g_1", "connector-bridge", t0, ""))["grants"].(map[string]any)
	if _, ok := got["kb:admin.purge@1"]; ok {
		t.Error("connector-bridge granted an admin capability")
	}
	support := compileDemo(t, demoGrant(t, "g_1", "support-chatbot", t0, `{"kb:page.write@1":{}}`))["grants"].(map[string]any)
	if a := support["kb:page.write@1"].(map[string]any)["demo"].(map[string]any)["acme"].(map[string]any)["requiresApproval"]; a != true {
		t.Errorf("support-chatbot write requiresApproval = %v, want true", a)
	}
}

func TestCompileNewestGrantWins(t *testing.T) {
	old := demoGrant(t, "g_old", "unrestricted", t0, "")
	newer := demoGrant(t, "g_new", "read-only-assistant", t0.Add(time.Hour), "")
	sameTimeLowerID := demoGrant(t, "g_a", "internal-agent", t0.Add(time.Hour), "")
	for _, order := range [][]store.Grant{{old, newer, sameTimeLowerID}, {sameTimeLowerID, newer, old}, {newer, old, sameTimeLowerID}} {
		grants := compileDemo(t, order...)["grants"].(map[string]any)
		if len(grants) != 1 {
			t.Fatalf("grants for %d refs, want only the read of read-only-assistant: %v", len(grants), grants)
		}
		if id := grants["kb:page.read@1"].(map[string]any)["demo"].(map[string]any)["acme"].(map[string]any)["grantId"]; id != "g_new" {
			t.Errorf("grantId = %v, want g_new", id)
		}
	}
}

func TestCompileDocument(t *testing.T) {
	data := compileDemo(t, demoGrant(t, "g_1", "read-only-assistant", t0, ""))
	assertJSON(t, "biome:install@1", data["capabilities"].(map[string]any)["biome:install@1"], `{
		"biome":{"id":"kernel","version":"1.0.0"},"lifecycle":"published","replacedBy":"",
		"riskTier":"high","effectClass":"admin","outputClassification":"internal","reach":"integration",
		"authorityEffect":"none","delegable":false,"descriptorKind":"","requiresApproval":false,"safeForAgents":false,
		"callerConstraint":"","humanBaseline":{"kind":"org-administrators","environments":["org"]},
		"requiredBindings":[],"instanceGrade":null,"resource":""}`)
	assertJSON(t, "profiles.support-chatbot", data["profiles"].(map[string]any)["support-chatbot"], `{
		"effectClasses":{"read":true,"write":true},"riskTiers":{"low":true},
		"environments":{"public":true,"public-session":true,"session":true},
		"environmentKinds":{"public":true,"session":true},
		"rateLimit":{"requests":60,"per":"1m"},"quota":{"requests":5000,"per":"24h"},
		"approval":{"effectClasses":{"write":true},"riskTiers":{}}}`)
	assertJSON(t, "environments", data["environments"], `{"app":{"kind":"app"},"org":{"kind":"org"},
		"project":{"kind":"project"},"public":{"kind":"public"},"public-session":{"kind":"public"},
		"sandbox":{"kind":"sandbox"},"session":{"kind":"session"},"store-review":{"kind":"store-review"},
		"system":{"kind":"system"},"trusted-dev":{"kind":"trusted-dev"}}`)
	assertJSON(t, "audience.session", data["audience"].(map[string]any)["session"], `{"public":true,"internal":true}`)
	assertJSON(t, "orgRoleRank", data["orgRoleRank"], `{"org_member":1,"org_admin":2,"org_owner":3}`)
	if rev, _ := data["revision"].(string); !strings.HasPrefix(rev, "sha256:") {
		t.Errorf("revision = %v", data["revision"])
	}
	b := demoBiome("1.0.0")
	given, err := Compile(Input{Capabilities: catalog(t, b), Biomes: []store.BiomeVersion{storedVersion(t, b)},
		Environments: DefaultEnvironments(), Profiles: Builtin(), Revision: "r42"})
	if err != nil || given["revision"] != "r42" {
		t.Errorf("revision = %v, %v, want r42", given["revision"], err)
	}
}

func TestCompileIsDeterministic(t *testing.T) {
	b := demoBiome("1.0.0")
	caps := catalog(t, b)
	grants := []store.Grant{
		demoGrant(t, "g_1", "internal-agent", t0, `{"kb:page.write@1":{"subjects":["agent:bot"]}}`),
		{ID: "g_2", BiomeID: "other", BiomeVersion: "2.0.0", Profile: "unrestricted", ApprovedAt: t0},
	}
	otherBiome := demoBiome("2.0.0")
	otherBiome.ID = "other"
	biomes := []store.BiomeVersion{storedVersion(t, b), storedVersion(t, otherBiome)}
	encode := func() string {
		data, err := Compile(Input{Capabilities: caps, Grants: grants, Biomes: biomes, Environments: DefaultEnvironments(), Profiles: Builtin()})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(data)
		return string(raw)
	}
	want := encode()
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10 {
		rng.Shuffle(len(caps), func(i, j int) { caps[i], caps[j] = caps[j], caps[i] })
		rng.Shuffle(len(grants), func(i, j int) { grants[i], grants[j] = grants[j], grants[i] })
		rng.Shuffle(len(biomes), func(i, j int) { biomes[i], biomes[j] = biomes[j], biomes[i] })
		if got := encode(); got != want {
			t.Fatalf("compile output depends on input order")
		}
	}
	grants[0].Profile = "read-only-assistant"
	var before, after map[string]any
	_ = json.Unmarshal([]byte(want), &before)
	_ = json.Unmarshal([]byte(encode()), &after)
	if before["revision"] == after["revision"] {
		t.Error("revision did not change with the grants")
	}
}

func TestCompileErrors(t *testing.T) {
	b := demoBiome("1.0.0")
	bv := storedVersion(t, b)
	tests := []struct {
		name string
		in   func(*Input)
		want string
	}{
		{"unknown profile", func(in *Input) { in.Grants[0].Profile = "gone" }, `grant g_1: unknown profile "gone"`},
		{"biome version not given", func(in *Input) { in.Biomes = nil }, "grant g_1: biome version demo@1.0.0 not given"},
		{"bad customize", func(in *Input) { in.Grants[0].Customize = json.RawMessage(`{"kb:page.read@1":{"color":"red"}}`) }, "grant g_1: /customize/kb:page.read@1/color"},
		{"bad capability manifest", func(in *Input) { in.Capabilities[0].Manifest = json.RawMessage(`{`) }, "capability kb:page.read@1"},
		{"bad biome manifest", func(in *Input) { in.Biomes[0].Manifest = json.RawMessage(`[]`) }, "biome demo@1.0.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Capabilities: catalog(t, b), Grants: []store.Grant{demoGrant(t, "g_1", "internal-agent", t0, "")},
				Biomes: []store.BiomeVersion{bv}, Environments: DefaultEnvironments(), Profiles: Builtin()}
			tt.in(&in)
			if _, err := Compile(in); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// BenchmarkCompile compiles 10,000 grants, one per biome, each biome requiring three
// capabilities of its own; every other grant customizes one of them.
func BenchmarkCompile(b *testing.B) {
	const n = 10_000
	in := Input{Environments: DefaultEnvironments(), Profiles: Builtin()}
	for i := range n {
		id := fmt.Sprintf("biome-%05d", i)
		refs := []string{id + ":doc.read@1", id + ":doc.write@1", id + ":doc.delete@1"}
		for j, ref := range refs {
			m := descr(ref, []string{"low", "medium", "high"}[j], []string{"read", "write", "write"}[j], "internal", false)
			in.Capabilities = append(in.Capabilities, store.Capability{Ref: ref, BiomeID: id, BiomeVersion: "1.0.0",
				Manifest: mustJSON(b, m), Lifecycle: store.LifecyclePublished})
		}
		in.Biomes = append(in.Biomes, store.BiomeVersion{ID: id, Version: "1.0.0",
			Manifest: mustJSON(b, map[string]any{"id": id, "version": "1.0.0", "requiresCapabilities": refs})})
		g := store.Grant{ID: fmt.Sprintf("g_%05d", i), Org: "acme", BiomeID: id, BiomeVersion: "1.0.0", Profile: "internal-agent", ApprovedAt: t0}
		if i%2 == 0 {
			g.Customize = json.RawMessage(`{"` + refs[1] + `":{"environments":["project"],"subjects":["agent:bot","group:g"],"resources":["docs/*"],"rateLimit":{"requests":10,"per":"1m"}}}`)
		}
		in.Grants = append(in.Grants, g)
	}
	for _, bm := range []struct {
		name     string
		revision string
	}{{"revision-given", "r1"}, {"revision-hashed", ""}} {
		b.Run(bm.name, func(b *testing.B) {
			in.Revision = bm.revision
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Compile(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestEffectiveRevoked: the newest grant of a scope decides; revoked, the scope has none,
// and the grant it superseded does not come back.
func TestEffectiveRevoked(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old := store.Grant{ID: "g-1", Org: "acme", BiomeID: "demo", ApprovedAt: t0}
	changed := store.Grant{ID: "g-2", Org: "acme", BiomeID: "demo", ApprovedAt: t0.Add(time.Hour), Supersedes: "g-1"}
	other := store.Grant{ID: "g-3", Org: "beta", BiomeID: "demo", ApprovedAt: t0}
	if got := Effective([]store.Grant{old, changed, other}); got[Scope{"acme", "demo"}].ID != "g-2" || got[Scope{"beta", "demo"}].ID != "g-3" {
		t.Fatalf("effective = %v, want g-2 for acme and g-3 for beta", got)
	}
	changed.RevokedBy, changed.RevokedAt = "user:alice", t0.Add(2*time.Hour)
	got := Effective([]store.Grant{old, changed, other})
	if g, ok := got[Scope{"acme", "demo"}]; ok {
		t.Fatalf("acme's revoked scope has effective grant %s, want none", g.ID)
	}
	if got[Scope{"beta", "demo"}].ID != "g-3" {
		t.Fatalf("beta's grant = %v, want g-3 untouched", got[Scope{"beta", "demo"}])
	}
	if n := Newest([]store.Grant{old, changed}); n[Scope{"acme", "demo"}].ID != "g-2" {
		t.Fatalf("newest = %v, want the revoked g-2", n)
	}
}

// TestCompileRevoked: a revoked grant compiles to nothing: its org has no grant entry and
// nothing granted to it in the index, the grant it changed does not come back, another
// org's grant of the same biome is untouched, and the revision differs from the unrevoked
// document's, so a serving bundle is rebuilt.
func TestCompileRevoked(t *testing.T) {
	first := demoGrant(t, "g_1", "read-only-assistant", t0, "")
	changed := demoGrant(t, "g_2", "internal-agent", t0.Add(time.Hour), "")
	changed.Supersedes = first.ID
	beta := demoGrant(t, "g_3", "read-only-assistant", t0, "")
	beta.Org = "beta"
	type doc struct {
		Grants    map[string]map[string]map[string]struct{ GrantID string }
		GrantedTo map[string]map[string]any
		Revision  string
	}
	compile := func(grants ...store.Grant) (d doc, orgs map[string]string) { // orgs: org → grant id, over every ref
		raw, err := json.Marshal(compileDemo(t, grants...))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		orgs = map[string]string{}
		for _, byBiome := range d.Grants {
			for org, g := range byBiome["demo"] {
				orgs[org] = g.GrantID
			}
		}
		return d, orgs
	}
	live, orgs := compile(first, changed, beta)
	if orgs["acme"] != "g_2" || orgs["beta"] != "g_3" {
		t.Fatalf("before the revoke: %v, want acme's g_2 and beta's g_3", orgs)
	}
	changed.RevokedBy, changed.RevokedAt = "user:admin", t0.Add(2*time.Hour)
	revoked, orgs := compile(first, changed, beta)
	if len(orgs) != 1 || orgs["beta"] != "g_3" {
		t.Fatalf("after the revoke: %v, want beta's g_3 only (acme's revoked grant and the one it changed gone)", orgs)
	}
	if len(revoked.GrantedTo["acme"]) != 0 || len(revoked.GrantedTo["beta"]) == 0 {
		t.Fatalf("grantedTo after the revoke: %v, want nothing for acme and beta's refs", revoked.GrantedTo)
	}
	if live.Revision == revoked.Revision {
		t.Fatalf("the revoke left the revision %s unchanged", live.Revision)
	}
}
