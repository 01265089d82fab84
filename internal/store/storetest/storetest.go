// Package storetest is the one conformance suite every store engine passes, in the style of
// OpenFGA's pkg/storage/test: an engine's test calls Run with a function opening a fresh,
// empty store.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// RawExecer is the test hook an engine's test adds to the store it hands to Run: it runs
// one SQL statement on the engine's own database, around the Store API, so the suite can
// show that the schema itself refuses what the API never offers (changing the audit log).
type RawExecer interface {
	ExecRaw(ctx context.Context, sql string) error
}

// Run runs the suite. open returns a new empty store for each subtest and closes it in
// t.Cleanup; the store must implement RawExecer.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	runSubtests(t, open, []subtest{
		{"PublishBiomeRoundTrip", testPublishBiomeRoundTrip},
		{"NotFound", testNotFound},
		{"RepublishIdenticalIsNoop", testRepublishIdentical},
		{"RepublishOtherContentConflicts", testRepublishOtherContent},
		{"PublishBiomeIsAtomic", testPublishAtomic},
		{"ListBiomeVersionsOldestFirst", testListBiomeVersions},
		{"NewVersionKeepsLifecycle", testNewVersionKeepsLifecycle},
		{"UpsertCapability", testUpsertCapability},
		{"TransitionLifecycle", testTransitionLifecycle},
		{"TransitionLifecycleIsCompareAndSet", testTransitionConcurrent},
		{"Grants", testGrants},
		{"Audit", testAudit},
		{"AuditIsAppendOnly", testAuditAppendOnly},
		{"AuditBatch", testAuditBatch},
		{"ListAudit", testListAudit},
		{"AuditStats", testAuditStats},
		{"AuditRollups", testAuditRollups},
		{"ApprovalsWaiting", testApprovalsWaiting},
		{"RevisionBumpsOnPolicyData", testRevision},
		{"ConcurrentPublish", testConcurrentPublish},
		{"Ping", testPing},
		{"Federation", testFederation},
		{"DeploymentKeys", testDeploymentKeys},
		{"DeploymentKeyReplace", testDeploymentKeyReplace},
		{"ChainRegistry", testChainRegistry},
		{"AuditPrune", testAuditPrune},
		{"AuditScanAndChains", testAuditScan},
		{"BiomeOwners", testBiomeOwners},
	})
	t.Run("Bindings", func(t *testing.T) { runBindings(t, open) })
	t.Run("Connections", func(t *testing.T) { runConnections(t, open) })
	t.Run("Obligations", func(t *testing.T) { runObligations(t, open) })
	t.Run("ApprovalNotify", func(t *testing.T) { runApprovalNotify(t, open) })
	t.Run("CrashSafety", func(t *testing.T) { runCrashSafety(t, open) })
	t.Run("PingAfterClose", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := s.Ping(context.Background()); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Ping after Close = %v, want ErrUnavailable", err)
		}
	})
}

// subtest is one conformance check, run on a fresh store of its own.
type subtest struct {
	name string
	fn   func(t *testing.T, s store.Store)
}

// runSubtests runs each test in parallel, each on a new store from open.
func runSubtests(t *testing.T, open func(t *testing.T) store.Store, tests []subtest) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each subtest has a store of its own
			tc.fn(t, open(t))
		})
	}
}

// t0 is a fixed time in whole microseconds, so round trips compare exactly.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)

func biome(id, version, hash string) store.BiomeVersion {
	return store.BiomeVersion{
		ID:      id,
		Version: version,
		// Odd spacing and key order: a document must come back byte for byte.
		Manifest:      json.RawMessage(`{"id": "` + id + `",  "version":"` + version + `"}`),
		Contributions: json.RawMessage(`[{"kind":"capability"}]`),
		ContentHash:   hash,
		DigestHash:    "digest-" + hash,
		Digest:        json.RawMessage(`{"riskTier":"low"}`),
		CreatedAt:     t0,
	}
}

func capability(ref, lifecycle string) store.Capability {
	return store.Capability{
		Ref:        ref,
		Manifest:   json.RawMessage(`{"ref": "` + ref + `", "riskTier": "low"}`),
		Invocation: json.RawMessage(`{"kind":"http","url":"http://127.0.0.1:9/x"}`),
		RunnerKind: "http",
		Lifecycle:  lifecycle,
		UpdatedAt:  t0,
	}
}

// owned is c as stored for biome version bv.
func owned(c store.Capability, bv store.BiomeVersion) store.Capability {
	c.BiomeID, c.BiomeVersion = bv.ID, bv.Version
	return c
}

func mustPublish(t *testing.T, s store.Store, bv store.BiomeVersion, caps ...store.Capability) {
	t.Helper()
	if err := s.PublishBiome(context.Background(), bv, caps); err != nil {
		t.Fatalf("PublishBiome(%s@%s): %v", bv.ID, bv.Version, err)
	}
}

func revision(t *testing.T, s store.Store) int64 {
	t.Helper()
	rev, err := s.Revision(context.Background())
	if err != nil {
		t.Fatalf("Revision: %v", err)
	}
	return rev
}

func equal[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

func testPublishBiomeRoundTrip(t *testing.T, s store.Store) {
	ctx := context.Background()
	bv := biome("demo", "1.0.0", "h1")
	read, write := capability("kb:page.read@1", store.LifecyclePublished), capability("kb:page.write@1", store.LifecycleSeeded)
	write.Invocation = nil
	mustPublish(t, s, bv, write, read)

	got, err := s.GetBiomeVersion(ctx, "demo", "1.0.0")
	if err != nil {
		t.Fatalf("GetBiomeVersion: %v", err)
	}
	equal(t, "biome version", got, bv)

	bare := biome("bare", "0.1.0", "h2")
	bare.Contributions, bare.Digest = nil, nil
	mustPublish(t, s, bare)
	got, err = s.GetBiomeVersion(ctx, "bare", "0.1.0")
	if err != nil {
		t.Fatalf("GetBiomeVersion: %v", err)
	}
	equal(t, "biome version without documents", got, bare)

	c, err := s.GetCapability(ctx, "kb:page.write@1")
	if err != nil {
		t.Fatalf("GetCapability: %v", err)
	}
	equal(t, "capability", c, owned(write, bv))

	all, err := s.ListCapabilities(ctx)
	if err != nil {
		t.Fatalf("ListCapabilities: %v", err)
	}
	equal(t, "catalog (by ref)", all, []store.Capability{owned(read, bv), owned(write, bv)})
}

func testNotFound(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustPublish(t, s, biome("demo", "1.0.0", "h1"), capability("kb:page.read@1", store.LifecyclePublished))
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"biome unknown", func() error { _, err := s.GetBiomeVersion(ctx, "nope", "1.0.0"); return err }},
		{"biome version unknown", func() error { _, err := s.GetBiomeVersion(ctx, "demo", "2.0.0"); return err }},
		{"capability unknown", func() error { _, err := s.GetCapability(ctx, "kb:page.read@2"); return err }},
		{"audit unknown", func() error { _, err := s.GetAudit(ctx, "a-unknown"); return err }},
		{"transition of unknown ref", func() error {
			return s.TransitionLifecycle(ctx, store.LifecycleEvent{Ref: "kb:none@1", From: "published", To: "deprecated", Actor: "admin"})
		}},
		{"grant of unknown biome version", func() error {
			return s.PutGrant(ctx, store.Grant{ID: "g1", Org: "acme", BiomeID: "demo", BiomeVersion: "9.9.9", DigestHash: "d", ApprovedBy: "admin"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, tc.name, tc.call(), store.ErrNotFound) })
	}
	for _, tc := range []struct {
		name string
		list func() (int, error)
	}{
		{"versions of unknown biome", func() (int, error) { v, err := s.ListBiomeVersions(ctx, "nope"); return len(v), err }},
		{"events of unknown ref", func() (int, error) { v, err := s.ListLifecycleEvents(ctx, "kb:none@1"); return len(v), err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n, err := tc.list(); err != nil || n != 0 {
				t.Fatalf("%s = %d items, %v; want none, nil", tc.name, n, err)
			}
		})
	}
}

func testRepublishIdentical(t *testing.T, s store.Store) {
	ctx := context.Background()
	bv, c := biome("demo", "1.0.0", "h1"), capability("kb:page.read@1", store.LifecyclePublished)
	mustPublish(t, s, bv, c)
	rev := revision(t, s)

	again := bv
	again.CreatedAt = t0.Add(time.Hour)
	mustPublish(t, s, again, c)

	got, err := s.GetBiomeVersion(ctx, "demo", "1.0.0")
	if err != nil {
		t.Fatalf("GetBiomeVersion: %v", err)
	}
	equal(t, "biome version after identical re-publish", got, bv)
	if r := revision(t, s); r != rev {
		t.Fatalf("revision moved from %d to %d on a no-op re-publish", rev, r)
	}
}

func testRepublishOtherContent(t *testing.T, s store.Store) {
	ctx := context.Background()
	bv := biome("demo", "1.0.0", "h1")
	mustPublish(t, s, bv, capability("kb:page.read@1", store.LifecyclePublished))

	other := biome("demo", "1.0.0", "h2")
	other.Manifest = json.RawMessage(`{"changed":true}`)
	err := s.PublishBiome(ctx, other, []store.Capability{capability("kb:page.write@1", store.LifecyclePublished)})
	wantErr(t, "same version, other content", err, store.ErrConflict)

	got, err := s.GetBiomeVersion(ctx, "demo", "1.0.0")
	if err != nil {
		t.Fatalf("GetBiomeVersion: %v", err)
	}
	equal(t, "stored version after refused re-publish", got, bv)
	_, err = s.GetCapability(ctx, "kb:page.write@1")
	wantErr(t, "capability of the refused publish", err, store.ErrNotFound)
}

func testPublishAtomic(t *testing.T, s store.Store) {
	ctx := context.Background()
	owner := biome("owner", "1.0.0", "h-owner")
	taken := capability("kb:taken@1", store.LifecyclePublished)
	mustPublish(t, s, owner, taken)

	badLifecycle := capability("kb:b@1", "live")
	foreign := capability("kb:b@1", store.LifecyclePublished)
	foreign.BiomeID, foreign.BiomeVersion = "owner", "1.0.0"
	badJSON := capability("kb:b@1", store.LifecyclePublished)
	badJSON.Manifest = json.RawMessage(`{"truncated":`)

	for _, tc := range []struct {
		name string
		caps []store.Capability
		want error
	}{
		// Refused in the database after the version and kb:a@1 were written: the
		// transaction must take them back.
		{"ref owned by another biome", []store.Capability{capability("kb:a@1", store.LifecyclePublished), taken}, store.ErrConflict},
		{"same ref twice", []store.Capability{capability("kb:a@1", store.LifecyclePublished), capability("kb:a@1", store.LifecycleSeeded)}, store.ErrConflict},
		{"unknown lifecycle", []store.Capability{capability("kb:a@1", store.LifecyclePublished), badLifecycle}, store.ErrInvalid},
		{"capability of another biome version", []store.Capability{capability("kb:a@1", store.LifecyclePublished), foreign}, store.ErrInvalid},
		{"manifest not JSON", []store.Capability{capability("kb:a@1", store.LifecyclePublished), badJSON}, store.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rev := revision(t, s)
			err := s.PublishBiome(ctx, biome("late", "1.0.0", "h-late"), tc.caps)
			wantErr(t, "PublishBiome", err, tc.want)

			_, err = s.GetBiomeVersion(ctx, "late", "1.0.0")
			wantErr(t, "biome version of the failed publish", err, store.ErrNotFound)
			_, err = s.GetCapability(ctx, "kb:a@1")
			wantErr(t, "first capability of the failed publish", err, store.ErrNotFound)
			got, err := s.GetCapability(ctx, "kb:taken@1")
			if err != nil {
				t.Fatalf("GetCapability(kb:taken@1): %v", err)
			}
			equal(t, "the other biome's capability", got, owned(taken, owner))
			if r := revision(t, s); r != rev {
				t.Fatalf("revision moved from %d to %d on a failed publish", rev, r)
			}
		})
	}

	for _, tc := range []struct {
		name   string
		mutate func(*store.BiomeVersion)
	}{
		{"no id", func(bv *store.BiomeVersion) { bv.ID = "" }},
		{"no version", func(bv *store.BiomeVersion) { bv.Version = "" }},
		{"no content hash", func(bv *store.BiomeVersion) { bv.ContentHash = "" }},
		{"no manifest", func(bv *store.BiomeVersion) { bv.Manifest = nil }},
		{"digest not JSON", func(bv *store.BiomeVersion) { bv.Digest = json.RawMessage("nope") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bv := biome("x", "1.0.0", "h")
			tc.mutate(&bv)
			wantErr(t, "PublishBiome", s.PublishBiome(ctx, bv, nil), store.ErrInvalid)
		})
	}
}

func testListBiomeVersions(t *testing.T, s store.Store) {
	ctx := context.Background()
	var want []store.BiomeVersion
	for i, v := range []string{"1.10.0", "1.2.0", "1.9.0"} {
		bv := biome("demo", v, "h"+v)
		bv.CreatedAt = t0.Add(time.Duration(i) * time.Minute)
		want = append(want, bv)
	}
	// Stored out of order: the list follows CreatedAt, not insertion or version text.
	for _, i := range []int{2, 0, 1} {
		mustPublish(t, s, want[i])
	}
	mustPublish(t, s, biome("other", "1.0.0", "h-other"))
	got, err := s.ListBiomeVersions(ctx, "demo")
	if err != nil {
		t.Fatalf("ListBiomeVersions: %v", err)
	}
	equal(t, "versions oldest first", got, want)
}

func testNewVersionKeepsLifecycle(t *testing.T, s store.Store) {
	ctx := context.Background()
	v1, v2 := biome("demo", "1.0.0", "h1"), biome("demo", "1.1.0", "h2")
	v2.CreatedAt = t0.Add(time.Hour)
	mustPublish(t, s, v1, capability("kb:page.read@1", store.LifecyclePublished))
	if err := s.TransitionLifecycle(ctx, store.LifecycleEvent{Ref: "kb:page.read@1", From: store.LifecyclePublished,
		To: store.LifecycleDeprecated, ReplacedBy: "kb:page.read@2", Actor: "admin", At: t0}); err != nil {
		t.Fatalf("TransitionLifecycle: %v", err)
	}
	next := capability("kb:page.read@1", store.LifecyclePublished)
	next.Manifest = json.RawMessage(`{"ref":"kb:page.read@1","riskTier":"medium"}`)
	next.UpdatedAt = t0.Add(time.Hour)
	mustPublish(t, s, v2, next)

	got, err := s.GetCapability(ctx, "kb:page.read@1")
	if err != nil {
		t.Fatalf("GetCapability: %v", err)
	}
	want := owned(next, v2)
	want.Lifecycle, want.ReplacedBy = store.LifecycleDeprecated, "kb:page.read@2"
	equal(t, "capability after v2", got, want)
}

func testUpsertCapability(t *testing.T, s store.Store) {
	ctx := context.Background()
	c := capability("gitea:issue.create@1", store.LifecycleSeeded)
	c.BiomeID, c.BiomeVersion, c.RunnerKind = "gitea", "mcp", "mcp-external"
	if err := s.UpsertCapability(ctx, c); err != nil {
		t.Fatalf("UpsertCapability(insert): %v", err)
	}
	changed := c
	changed.Manifest = json.RawMessage(`{"changed":true}`)
	changed.Invocation = nil
	changed.Lifecycle = store.LifecyclePublished
	changed.UpdatedAt = t0.Add(time.Minute)
	if err := s.UpsertCapability(ctx, changed); err != nil {
		t.Fatalf("UpsertCapability(update): %v", err)
	}
	got, err := s.GetCapability(ctx, c.Ref)
	if err != nil {
		t.Fatalf("GetCapability: %v", err)
	}
	want := changed
	want.Lifecycle = store.LifecycleSeeded // moves only through TransitionLifecycle
	equal(t, "updated capability", got, want)

	for _, tc := range []struct {
		name   string
		mutate func(*store.Capability)
		want   error
	}{
		{"ref owned by another biome", func(c *store.Capability) { c.BiomeID = "intruder" }, store.ErrConflict},
		{"empty ref", func(c *store.Capability) { c.Ref = "" }, store.ErrInvalid},
		{"empty biome", func(c *store.Capability) { c.BiomeID = "" }, store.ErrInvalid},
		{"unknown lifecycle", func(c *store.Capability) { c.Lifecycle = "" }, store.ErrInvalid},
		{"invocation not JSON", func(c *store.Capability) { c.Invocation = json.RawMessage("{") }, store.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := c
			tc.mutate(&bad)
			wantErr(t, "UpsertCapability", s.UpsertCapability(ctx, bad), tc.want)
			got, err := s.GetCapability(ctx, c.Ref)
			if err != nil {
				t.Fatalf("GetCapability: %v", err)
			}
			equal(t, "stored capability after a refused upsert", got, want)
		})
	}
}

func testTransitionLifecycle(t *testing.T, s store.Store) {
	ctx := context.Background()
	bv := biome("demo", "1.0.0", "h1")
	c := capability("kb:page.read@1", store.LifecycleSeeded)
	mustPublish(t, s, bv, c)

	steps := []struct {
		name string
		ev   store.LifecycleEvent
		want error
	}{
		{"seeded to published", store.LifecycleEvent{Ref: c.Ref, From: "seeded", To: "published", Actor: "admin", At: t0}, nil},
		{"from a state it is not in", store.LifecycleEvent{Ref: c.Ref, From: "seeded", To: "published", Actor: "admin", At: t0}, store.ErrConflict},
		{"published to deprecated", store.LifecycleEvent{Ref: c.Ref, From: "published", To: "deprecated", ReplacedBy: "kb:page.read@2", Actor: "admin", At: t0.Add(time.Second)}, nil},
		{"unknown target state", store.LifecycleEvent{Ref: c.Ref, From: "deprecated", To: "gone", Actor: "admin"}, store.ErrInvalid},
		{"no actor", store.LifecycleEvent{Ref: c.Ref, From: "deprecated", To: "retired"}, store.ErrInvalid},
		{"deprecated to retired", store.LifecycleEvent{Ref: c.Ref, From: "deprecated", To: "retired", ReplacedBy: "kb:page.read@2", Actor: "ops", At: t0.Add(2 * time.Second)}, nil},
	}
	var want []store.LifecycleEvent
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			err := s.TransitionLifecycle(ctx, st.ev)
			if st.want == nil {
				if err != nil {
					t.Fatalf("TransitionLifecycle: %v", err)
				}
				want = append(want, st.ev)
				return
			}
			wantErr(t, "TransitionLifecycle", err, st.want)
		})
	}
	got, err := s.GetCapability(ctx, c.Ref)
	if err != nil {
		t.Fatalf("GetCapability: %v", err)
	}
	if got.Lifecycle != store.LifecycleRetired || got.ReplacedBy != "kb:page.read@2" {
		t.Fatalf("capability is %q replaced by %q, want retired replaced by kb:page.read@2", got.Lifecycle, got.ReplacedBy)
	}
	events, err := s.ListLifecycleEvents(ctx, c.Ref)
	if err != nil {
		t.Fatalf("ListLifecycleEvents: %v", err)
	}
	equal(t, "events of the successful transitions, oldest first", events, want)
}

func testTransitionConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustPublish(t, s, biome("demo", "1.0.0", "h1"), capability("kb:page.read@1", store.LifecyclePublished))
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = s.TransitionLifecycle(ctx, store.LifecycleEvent{Ref: "kb:page.read@1", From: "published",
				To: "deprecated", Actor: fmt.Sprintf("admin-%d", i)})
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("transition %d: %v, want nil or ErrConflict", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d racing transitions succeeded, want exactly 1", won, n)
	}
	events, err := s.ListLifecycleEvents(ctx, "kb:page.read@1")
	if err != nil {
		t.Fatalf("ListLifecycleEvents: %v", err)
	}
	if len(events) != 1 {
		t.Fatalf("%d events recorded, want 1", len(events))
	}
}

func testGrants(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustPublish(t, s, biome("demo", "1.0.0", "h1"), capability("kb:page.read@1", store.LifecyclePublished))
	later := store.Grant{ID: "g-2", Org: "acme", BiomeID: "demo", BiomeVersion: "1.0.0", DigestHash: "digest-h1",
		Profile: "read-only-assistant", ApprovedBy: "user:alice", ApprovedAt: t0.Add(time.Hour)}
	earlier := store.Grant{ID: "g-1", Org: "beta", BiomeID: "demo", BiomeVersion: "1.0.0", DigestHash: "digest-h1",
		Profile: "internal-agent", Customize: json.RawMessage(`{"kb:page.read@1": {"environments": ["project"]}}`),
		ApprovedBy: "user:bob", ApprovedAt: t0}
	for _, g := range []store.Grant{later, earlier} {
		if err := s.PutGrant(ctx, g); err != nil {
			t.Fatalf("PutGrant(%s): %v", g.ID, err)
		}
	}
	got, err := s.ListGrants(ctx)
	if err != nil {
		t.Fatalf("ListGrants: %v", err)
	}
	equal(t, "grants, oldest approval first", got, []store.Grant{earlier, later})

	for _, tc := range []struct {
		name   string
		mutate func(*store.Grant)
		want   error
	}{
		{"same id again", func(g *store.Grant) { g.Profile = "unrestricted" }, store.ErrConflict},
		{"unknown biome version", func(g *store.Grant) { g.ID, g.BiomeVersion = "g-3", "2.0.0" }, store.ErrNotFound},
		{"no id", func(g *store.Grant) { g.ID = "" }, store.ErrInvalid},
		{"no digest", func(g *store.Grant) { g.ID, g.DigestHash = "g-3", "" }, store.ErrInvalid},
		{"no approver", func(g *store.Grant) { g.ID, g.ApprovedBy = "g-3", "" }, store.ErrInvalid},
		{"customize not JSON", func(g *store.Grant) { g.ID, g.Customize = "g-3", json.RawMessage("[") }, store.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := earlier
			tc.mutate(&g)
			wantErr(t, "PutGrant", s.PutGrant(ctx, g), tc.want)
		})
	}
	got, err = s.ListGrants(ctx)
	if err != nil {
		t.Fatalf("ListGrants: %v", err)
	}
	equal(t, "grants after refused puts", got, []store.Grant{earlier, later})

	// A change records a new grant naming the one it supersedes; a revoke stamps one grant
	// of its own org, once, and bumps the revision.
	changed := later
	changed.ID, changed.Profile, changed.ApprovedAt, changed.Supersedes = "g-4", "internal-agent", t0.Add(2*time.Hour), later.ID
	if err := s.PutGrant(ctx, changed); err != nil {
		t.Fatalf("PutGrant(changed): %v", err)
	}
	rev, err := s.Revision(ctx)
	if err != nil {
		t.Fatalf("Revision: %v", err)
	}
	wantErr(t, "RevokeGrant of another org's grant", func() error {
		_, err := s.RevokeGrant(ctx, "beta", changed.ID, "user:mallory", t0)
		return err
	}(), store.ErrNotFound)
	wantErr(t, "RevokeGrant of an unknown grant", func() error { _, err := s.RevokeGrant(ctx, "acme", "g-none", "user:alice", t0); return err }(), store.ErrNotFound)
	wantErr(t, "RevokeGrant without revoker", func() error { _, err := s.RevokeGrant(ctx, "acme", changed.ID, "", t0); return err }(), store.ErrInvalid)
	revokedAt := t0.Add(3 * time.Hour)
	revoked, err := s.RevokeGrant(ctx, "acme", changed.ID, "user:carol", revokedAt)
	if err != nil {
		t.Fatalf("RevokeGrant: %v", err)
	}
	want := changed
	want.RevokedBy, want.RevokedAt = "user:carol", revokedAt
	equal(t, "the revoked grant", revoked, want)
	if after, err := s.Revision(ctx); err != nil || after <= rev {
		t.Fatalf("revision after a revoke = %d (%v), want above %d", after, err, rev)
	}
	_, err = s.RevokeGrant(ctx, "acme", changed.ID, "user:dave", t0.Add(4*time.Hour))
	wantErr(t, "RevokeGrant twice", err, store.ErrConflict)
	got, err = s.ListGrants(ctx)
	if err != nil {
		t.Fatalf("ListGrants: %v", err)
	}
	equal(t, "grants after a change and a revoke", got, []store.Grant{earlier, later, want})
}

// AuditRecord is a complete denied record with every column set, at t0.
func AuditRecord(id string) store.AuditRecord {
	return store.AuditRecord{
		ID: id, Time: t0, Ref: "kb:page.read@1", SubjectKind: "agent", SubjectRef: "agent:support-bot",
		Environment: "project", Decision: "denied",
		Reasons:        json.RawMessage(`[{"code":"MISSING_GRANT","detail":"no grant"}]`),
		Suggestions:    json.RawMessage(`[{"kind":"request-grant"}]`),
		Obligations:    json.RawMessage(`[]`),
		BundleRevision: "r42", InputHash: "sha256:abc", Runner: "http", Outcome: "not-run",
		LatencyMicros: 1234, ParentID: "a-parent", Detail: json.RawMessage(`{"groups":["support"]}`),
	}
}

func testAudit(t *testing.T, s store.Store) {
	ctx := context.Background()
	full := AuditRecord("a-1")
	bare := store.AuditRecord{ID: "a-2", Time: t0, Decision: "allowed"}
	for _, r := range []store.AuditRecord{full, bare} {
		if err := s.AppendAudit(ctx, r); err != nil {
			t.Fatalf("AppendAudit(%s): %v", r.ID, err)
		}
		got, err := s.GetAudit(ctx, r.ID)
		if err != nil {
			t.Fatalf("GetAudit(%s): %v", r.ID, err)
		}
		equal(t, "audit record", got, r)
	}
	stamped := store.AuditRecord{ID: "a-3", Decision: "error"}
	before := time.Now().Add(-time.Second)
	if err := s.AppendAudit(ctx, stamped); err != nil {
		t.Fatalf("AppendAudit without time: %v", err)
	}
	got, err := s.GetAudit(ctx, "a-3")
	if err != nil {
		t.Fatalf("GetAudit: %v", err)
	}
	if got.Time.Before(before) || got.Time.After(time.Now().Add(time.Second)) {
		t.Fatalf("record without time stored at %v, want now", got.Time)
	}

	for _, tc := range []struct {
		name   string
		mutate func(*store.AuditRecord)
		want   error
	}{
		{"same id again", func(r *store.AuditRecord) { r.Decision = "allowed" }, store.ErrConflict},
		{"no id", func(r *store.AuditRecord) { r.ID = "" }, store.ErrInvalid},
		{"no decision", func(r *store.AuditRecord) { r.ID, r.Decision = "a-4", "" }, store.ErrInvalid},
		{"reasons not JSON", func(r *store.AuditRecord) { r.ID, r.Reasons = "a-4", json.RawMessage("[{") }, store.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := full
			tc.mutate(&r)
			wantErr(t, "AppendAudit", s.AppendAudit(ctx, r), tc.want)
		})
	}
	got, err = s.GetAudit(ctx, "a-1")
	if err != nil {
		t.Fatalf("GetAudit: %v", err)
	}
	equal(t, "audit record after a refused duplicate", got, full)
}

func testAuditAppendOnly(t *testing.T, s store.Store) {
	ctx := context.Background()
	raw, ok := s.(RawExecer)
	if !ok {
		t.Fatalf("the engine's store %T does not implement storetest.RawExecer: its test must add the hook", s)
	}
	r := AuditRecord("a-1")
	if err := s.AppendAudit(ctx, r); err != nil {
		t.Fatalf("AppendAudit: %v", err)
	}
	for _, q := range []string{
		`UPDATE audit_log SET decision = 'allowed' WHERE id = 'a-1'`,
		`UPDATE audit_log SET reasons = NULL`,
		`DELETE FROM audit_log WHERE id = 'a-1'`,
		`DELETE FROM audit_log`,
	} {
		t.Run(q, func(t *testing.T) {
			if err := raw.ExecRaw(ctx, q); err == nil {
				t.Fatalf("%s succeeded on the append-only audit log", q)
			}
			got, err := s.GetAudit(ctx, "a-1")
			if err != nil {
				t.Fatalf("GetAudit: %v", err)
			}
			equal(t, "audit record", got, r)
		})
	}
	if err := s.AppendAudit(ctx, AuditRecord("a-2")); err != nil {
		t.Fatalf("AppendAudit after refused changes: %v", err)
	}
}

func testRevision(t *testing.T, s store.Store) {
	ctx := context.Background()
	steps := []struct {
		name  string
		do    func() error
		moves bool
	}{
		{"publish", func() error {
			return s.PublishBiome(ctx, biome("demo", "1.0.0", "h1"), []store.Capability{capability("kb:page.read@1", store.LifecycleSeeded)})
		}, true},
		{"identical re-publish", func() error {
			return s.PublishBiome(ctx, biome("demo", "1.0.0", "h1"), []store.Capability{capability("kb:page.read@1", store.LifecycleSeeded)})
		}, false},
		{"upsert capability", func() error {
			c := capability("kb:page.write@1", store.LifecycleSeeded)
			c.BiomeID, c.BiomeVersion = "demo", "1.0.0"
			return s.UpsertCapability(ctx, c)
		}, true},
		{"transition", func() error {
			return s.TransitionLifecycle(ctx, store.LifecycleEvent{Ref: "kb:page.read@1", From: "seeded", To: "published", Actor: "admin"})
		}, true},
		{"refused transition", func() error {
			_ = s.TransitionLifecycle(ctx, store.LifecycleEvent{Ref: "kb:page.read@1", From: "seeded", To: "published", Actor: "admin"})
			return nil
		}, false},
		{"grant", func() error {
			return s.PutGrant(ctx, store.Grant{ID: "g1", Org: "acme", BiomeID: "demo", BiomeVersion: "1.0.0", DigestHash: "digest-h1", ApprovedBy: "admin"})
		}, true},
		{"audit", func() error { return s.AppendAudit(ctx, AuditRecord("a-1")) }, false},
	}
	rev := revision(t, s)
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		next := revision(t, s)
		switch {
		case st.moves && next <= rev:
			t.Fatalf("revision %d after %s, want more than %d", next, st.name, rev)
		case !st.moves && next != rev:
			t.Fatalf("revision moved from %d to %d on %s", rev, next, st.name)
		}
		rev = next
	}
}

func testConcurrentPublish(t *testing.T, s store.Store) {
	ctx := context.Background()
	const n = 8
	rev := revision(t, s)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("biome-%d", i)
			errs[i] = s.PublishBiome(ctx, biome(id, "1.0.0", "h"+id), []store.Capability{
				capability(id+":thing.read@1", store.LifecyclePublished),
				capability(id+":thing.write@1", store.LifecyclePublished),
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("publish %d: %v", i, err)
		}
	}
	all, err := s.ListCapabilities(ctx)
	if err != nil {
		t.Fatalf("ListCapabilities: %v", err)
	}
	if len(all) != 2*n {
		t.Fatalf("%d capabilities after %d parallel publishes of 2, want %d", len(all), n, 2*n)
	}
	if r := revision(t, s); r < rev+n {
		t.Fatalf("revision %d after %d publishes from %d", r, n, rev)
	}
}

func testPing(t *testing.T, s store.Store) {
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}
