package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// runConnections is the conformance suite of store.ConnectionStore, and of MCPServer.OAuth.
func runConnections(t *testing.T, open func(t *testing.T) store.Store) {
	runSubtests(t, open, []subtest{
		{"RoundTrip", testConnectionRoundTrip},
		{"PutReplacesTheSameOwner", testConnectionPutReplaces},
		{"NotFound", testConnectionNotFound},
		{"ListByOrg", testConnectionList},
		{"UpdateIsCompareAndSet", testConnectionUpdate},
		{"ConcurrentUpdatesOneWins", testConnectionUpdateConcurrent},
		{"Delete", testConnectionDelete},
		{"ResealIsAtomic", testConnectionReseal},
		{"Invalid", testConnectionInvalid},
		{"StateTakenOnce", testConnectionStateTake},
		{"ConcurrentTakesOneWins", testConnectionStateTakeConcurrent},
		{"StatePrune", testConnectionStatePrune},
		{"MCPServerOAuth", testMCPServerOAuth},
		{"MCPServerOAuthResealIsAtomic", testMCPServerOAuthReseal},
		{"CredentialWithConnectionsKept", testCredentialWithConnections},
	})
}

func connection(id, org, provider, ownerKind, ownerRef string) store.Connection {
	return store.Connection{ID: id, Org: org, ProviderID: provider, OwnerKind: ownerKind, OwnerRef: ownerRef,
		Status: store.ConnectionConnected, Scopes: []string{"repo", "read:user"}, AccessSealed: "sb1.k1.access-" + id,
		RefreshSealed: "sb1.k1.refresh-" + id, KeyID: "k1", ExpiresAt: t0.Add(time.Hour), Version: 1,
		CreatedBy: "user:alice", CreatedAt: t0}
}

func connectionState(state, org string, expires time.Time) store.ConnectionState {
	return store.ConnectionState{State: state, Org: org, ProviderID: "gh", OwnerKind: store.OwnerUser, OwnerRef: "user:alice",
		CreatedBy: "user:alice", VerifierSealed: "sb1.k1.verifier-" + state, KeyID: "k1", CreatedAt: t0, ExpiresAt: expires}
}

func mustPutConnection(t *testing.T, s store.Store, c store.Connection) {
	t.Helper()
	if err := s.PutConnection(context.Background(), c); err != nil {
		t.Fatalf("PutConnection(%s): %v", c.ID, err)
	}
}

func mustGetConnection(t *testing.T, s store.Store, org, id string) store.Connection {
	t.Helper()
	c, err := s.GetConnectionByID(context.Background(), org, id)
	if err != nil {
		t.Fatalf("GetConnectionByID(%s, %s): %v", org, id, err)
	}
	return c
}

func testConnectionRoundTrip(t *testing.T, s store.Store) {
	ctx := context.Background()
	full := connection("con_1", "acme", "gh", store.OwnerUser, "user:alice")
	full.RefreshedAt = t0.Add(time.Minute)
	// No expiry, no refresh token, no scopes, never refreshed, needing a reconnect.
	bare := connection("con_2", "acme", "gh", store.OwnerOrg, "")
	bare.ExpiresAt, bare.RefreshSealed, bare.Scopes, bare.Status = time.Time{}, "", nil, store.ConnectionNeedsReconnect
	for _, c := range []store.Connection{full, bare} {
		mustPutConnection(t, s, c)
		t.Run(c.ID, func(t *testing.T) {
			equal(t, "by id", mustGetConnection(t, s, c.Org, c.ID), c)
			got, err := s.GetConnection(ctx, c.Org, c.ProviderID, c.OwnerKind, c.OwnerRef)
			if err != nil {
				t.Fatalf("GetConnection: %v", err)
			}
			equal(t, "by owner", got, c)
		})
	}
	// Times are kept as the store keeps every time: UTC, whole microseconds.
	local := connection("con_3", "acme", "gh", store.OwnerUser, "user:bob")
	local.ExpiresAt = time.Date(2026, 3, 1, 14, 0, 0, 123456789, time.FixedZone("x", 2*3600))
	mustPutConnection(t, s, local)
	if got := mustGetConnection(t, s, "acme", "con_3"); !got.ExpiresAt.Equal(store.Stamp(local.ExpiresAt)) || got.ExpiresAt.Location() != time.UTC {
		t.Fatalf("ExpiresAt %v, want %v", got.ExpiresAt, store.Stamp(local.ExpiresAt))
	}
}

func testConnectionPutReplaces(t *testing.T, s store.Store) {
	ctx := context.Background()
	orig := connection("con_1", "acme", "gh", store.OwnerUser, "user:alice")
	// Other owners, orgs and providers the reconnect must leave alone.
	others := []store.Connection{
		connection("con_2", "acme", "gh", store.OwnerUser, "user:bob"),
		connection("con_3", "acme", "gh", store.OwnerOrg, ""),
		connection("con_4", "acme", "linear", store.OwnerUser, "user:alice"),
		connection("con_5", "other", "gh", store.OwnerUser, "user:alice"),
	}
	for _, c := range append([]store.Connection{orig}, others...) {
		mustPutConnection(t, s, c)
	}
	// A reconnect after a needs-reconnect: a new id, new tokens, version 1 again.
	if err := s.UpdateConnection(ctx, bumped(orig, func(c *store.Connection) { c.Status = store.ConnectionNeedsReconnect })); err != nil {
		t.Fatalf("UpdateConnection: %v", err)
	}
	re := connection("con_6", "acme", "gh", store.OwnerUser, "user:alice")
	re.AccessSealed, re.RefreshSealed, re.Scopes, re.CreatedAt = "sb1.k2.new", "", []string{"repo"}, t0.Add(time.Hour)
	re.KeyID = "k2"
	mustPutConnection(t, s, re)
	got, err := s.GetConnection(ctx, "acme", "gh", store.OwnerUser, "user:alice")
	if err != nil {
		t.Fatalf("GetConnection after reconnect: %v", err)
	}
	equal(t, "reconnected", got, re)
	_, err = s.GetConnectionByID(ctx, "acme", "con_1")
	wantErr(t, "the replaced connection's id", err, store.ErrNotFound)
	for _, c := range others {
		equal(t, "untouched "+c.ID, mustGetConnection(t, s, c.Org, c.ID), c)
	}
	// Reconnecting under the id of the same owner's stored connection is a replacement too.
	same := re
	same.AccessSealed = "sb1.k2.newer"
	mustPutConnection(t, s, same)
	equal(t, "replaced under its own id", mustGetConnection(t, s, "acme", "con_6"), same)
	// An id another owner's connection holds is a conflict, and changes nothing.
	clash := connection("con_2", "acme", "gh", store.OwnerUser, "user:alice")
	wantErr(t, "PutConnection with another owner's id", s.PutConnection(ctx, clash), store.ErrConflict)
	equal(t, "after the clash", mustGetConnection(t, s, "acme", "con_6"), same)
	equal(t, "the other owner's after the clash", mustGetConnection(t, s, "acme", "con_2"), others[0])
}

func testConnectionNotFound(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustPutConnection(t, s, connection("con_1", "acme", "gh", store.OwnerUser, "user:alice"))
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"unknown owner", func() error {
			_, err := s.GetConnection(ctx, "acme", "gh", store.OwnerUser, "user:bob")
			return err
		}},
		{"org owner of the same provider", func() error { _, err := s.GetConnection(ctx, "acme", "gh", store.OwnerOrg, ""); return err }},
		{"another org's owner", func() error {
			_, err := s.GetConnection(ctx, "other", "gh", store.OwnerUser, "user:alice")
			return err
		}},
		{"unknown id", func() error { _, err := s.GetConnectionByID(ctx, "acme", "con_none"); return err }},
		{"another org's id", func() error { _, err := s.GetConnectionByID(ctx, "other", "con_1"); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, tc.name, tc.call(), store.ErrNotFound) })
	}
}

func testConnectionList(t *testing.T, s store.Store) {
	ctx := context.Background()
	// Put out of order: the list is by provider, owner kind ("org" < "user"), owner ref.
	want := []store.Connection{
		connection("con_a", "acme", "a-provider", store.OwnerUser, "user:zed"),
		connection("con_b", "acme", "gh", store.OwnerOrg, ""),
		connection("con_c", "acme", "gh", store.OwnerUser, "user:alice"),
		connection("con_d", "acme", "gh", store.OwnerUser, "user:bob"),
		connection("con_e", "acme", "linear", store.OwnerOrg, ""),
	}
	for _, i := range []int{3, 0, 4, 2, 1} {
		mustPutConnection(t, s, want[i])
	}
	mustPutConnection(t, s, connection("con_x", "other", "gh", store.OwnerOrg, ""))
	got, err := s.ListConnections(ctx, "acme")
	if err != nil {
		t.Fatalf("ListConnections: %v", err)
	}
	equal(t, "connections of acme", got, want)
	for _, org := range []string{"nobody", ""} {
		got, err := s.ListConnections(ctx, org)
		if err != nil || len(got) != 0 {
			t.Fatalf("ListConnections(%q) = %+v, %v; want none", org, got, err)
		}
	}
}

// bumped is c as an update stores it: the next version, changed by change.
func bumped(c store.Connection, change func(*store.Connection)) store.Connection {
	c.Version++
	if change != nil {
		change(&c)
	}
	return c
}

func testConnectionUpdate(t *testing.T, s store.Store) {
	ctx := context.Background()
	c := connection("con_1", "acme", "gh", store.OwnerUser, "user:alice")
	mustPutConnection(t, s, c)
	v2 := bumped(c, func(c *store.Connection) {
		c.AccessSealed, c.RefreshSealed, c.KeyID = "sb1.k2.access2", "sb1.k2.refresh2", "k2"
		c.Scopes, c.ExpiresAt, c.RefreshedAt = []string{"repo"}, t0.Add(2*time.Hour), t0.Add(time.Hour)
	})
	if err := s.UpdateConnection(ctx, v2); err != nil {
		t.Fatalf("UpdateConnection v2: %v", err)
	}
	equal(t, "after the refresh", mustGetConnection(t, s, "acme", "con_1"), v2)
	// An update stores only the tokens, status, scopes, expiry and refresh time.
	v3 := bumped(v2, func(c *store.Connection) {
		c.Status, c.ExpiresAt, c.RefreshSealed, c.Scopes = store.ConnectionNeedsReconnect, time.Time{}, "", nil
	})
	moved := v3
	moved.ProviderID, moved.OwnerRef, moved.CreatedBy, moved.CreatedAt = "linear", "user:bob", "user:mallory", t0.Add(time.Hour)
	if err := s.UpdateConnection(ctx, moved); err != nil {
		t.Fatalf("UpdateConnection v3: %v", err)
	}
	equal(t, "after the status change", mustGetConnection(t, s, "acme", "con_1"), v3)

	for _, tc := range []struct {
		name string
		c    store.Connection
		want error
	}{
		{"stale version", bumped(v2, nil), store.ErrConflict},
		{"version ahead", bumped(bumped(v3, nil), nil), store.ErrConflict},
		{"the same version again", v3, store.ErrConflict},
		{"another org's id", func() store.Connection { x := bumped(v3, nil); x.Org = "other"; return x }(), store.ErrNotFound},
		{"unknown id", func() store.Connection { x := bumped(v3, nil); x.ID = "con_none"; return x }(), store.ErrNotFound},
		{"version 1", func() store.Connection { x := c; x.AccessSealed = "sb1.k1.x"; return x }(), store.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, tc.name, s.UpdateConnection(ctx, tc.c), tc.want)
			equal(t, "unchanged", mustGetConnection(t, s, "acme", "con_1"), v3)
		})
	}
	if _, err := s.DeleteConnection(ctx, "acme", "con_1"); err != nil {
		t.Fatalf("DeleteConnection: %v", err)
	}
	wantErr(t, "update of a deleted connection", s.UpdateConnection(ctx, bumped(v3, nil)), store.ErrNotFound)
}

// testConnectionUpdateConcurrent: replicas refreshing the same token at once, each from the
// version it read: exactly one stores its rotated tokens.
func testConnectionUpdateConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	c := connection("con_1", "acme", "gh", store.OwnerUser, "user:alice")
	mustPutConnection(t, s, c)
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.UpdateConnection(ctx, bumped(c, func(c *store.Connection) {
				c.AccessSealed, c.RefreshSealed = fmt.Sprintf("sb1.k1.access-%d", i), fmt.Sprintf("sb1.k1.refresh-%d", i)
			}))
		}()
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("updates %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("update %d: %v, want ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no update won")
	}
	got := mustGetConnection(t, s, "acme", "con_1")
	if got.Version != 2 || got.RefreshSealed != fmt.Sprintf("sb1.k1.refresh-%d", winner) || got.AccessSealed != fmt.Sprintf("sb1.k1.access-%d", winner) {
		t.Fatalf("stored %+v, want the tokens of update %d at version 2", got, winner)
	}
}

func testConnectionDelete(t *testing.T, s store.Store) {
	ctx := context.Background()
	c := connection("con_1", "acme", "gh", store.OwnerUser, "user:alice")
	c.ExpiresAt, c.RefreshSealed = time.Time{}, ""
	keep := connection("con_2", "acme", "gh", store.OwnerOrg, "")
	mustPutConnection(t, s, c)
	mustPutConnection(t, s, keep)

	_, err := s.DeleteConnection(ctx, "other", "con_1")
	wantErr(t, "DeleteConnection of another org's", err, store.ErrNotFound)
	equal(t, "after another org's delete", mustGetConnection(t, s, "acme", "con_1"), c)

	got, err := s.DeleteConnection(ctx, "acme", "con_1")
	if err != nil {
		t.Fatalf("DeleteConnection: %v", err)
	}
	equal(t, "the deleted connection", got, c)
	_, err = s.GetConnectionByID(ctx, "acme", "con_1")
	wantErr(t, "GetConnectionByID deleted", err, store.ErrNotFound)
	_, err = s.DeleteConnection(ctx, "acme", "con_1")
	wantErr(t, "DeleteConnection again", err, store.ErrNotFound)
	list, err := s.ListConnections(ctx, "acme")
	if err != nil {
		t.Fatalf("ListConnections: %v", err)
	}
	equal(t, "left", list, []store.Connection{keep})
}

func testConnectionReseal(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := connection("con_a", "acme", "gh", store.OwnerUser, "user:alice")
	b := connection("con_b", "other", "gh", store.OwnerOrg, "")
	b.RefreshSealed = ""
	c := connection("con_c", "acme", "linear", store.OwnerOrg, "")
	for _, x := range []store.Connection{a, b, c} {
		mustPutConnection(t, s, x)
	}
	// An error on the second leaves the first unchanged.
	boom := errors.New("boom")
	calls := 0
	_, err := s.ResealConnections(ctx, func(x store.Connection) (string, string, string, error) {
		calls++
		if calls == 2 {
			return "", "", "", boom
		}
		return "sb1.k2.resealed", "sb1.k2.resealed", "k2", nil
	})
	wantErr(t, "ResealConnections failing on the second", err, boom)
	for _, x := range []store.Connection{a, b, c} {
		equal(t, "after the failed reseal", mustGetConnection(t, s, x.Org, x.ID), x)
	}

	reseal := func(x store.Connection) (string, string, string, error) {
		refresh := ""
		if x.RefreshSealed != "" {
			refresh = "sb2.k2." + x.RefreshSealed
		}
		return "sb2.k2." + x.AccessSealed, refresh, "k2", nil
	}
	n, err := s.ResealConnections(ctx, reseal)
	if err != nil || n != 3 {
		t.Fatalf("ResealConnections = %d, %v; want 3", n, err)
	}
	for _, x := range []store.Connection{a, b, c} {
		want := x
		want.AccessSealed, want.RefreshSealed, want.KeyID, _ = reseal(x)
		equal(t, "resealed "+x.ID, mustGetConnection(t, s, x.Org, x.ID), want)
	}
	// A reseal keeps the version: a refresh read before it still stores its tokens.
	if err := s.UpdateConnection(ctx, bumped(a, nil)); err != nil {
		t.Fatalf("UpdateConnection after the reseal: %v", err)
	}
}

func testConnectionInvalid(t *testing.T, s store.Store) {
	ctx := context.Background()
	good := connection("con_1", "acme", "gh", store.OwnerUser, "user:alice")
	for _, tc := range []struct {
		name   string
		change func(*store.Connection)
	}{
		{"no id", func(c *store.Connection) { c.ID = "" }},
		{"no org", func(c *store.Connection) { c.Org = "" }},
		{"no provider", func(c *store.Connection) { c.ProviderID = "" }},
		{"no access token", func(c *store.Connection) { c.AccessSealed = "" }},
		{"no key id", func(c *store.Connection) { c.KeyID = "" }},
		{"unknown owner kind", func(c *store.Connection) { c.OwnerKind = "team" }},
		{"org owner with a ref", func(c *store.Connection) { c.OwnerKind = store.OwnerOrg }},
		{"user owner without a ref", func(c *store.Connection) { c.OwnerRef = "" }},
		{"unknown status", func(c *store.Connection) { c.Status = "revoked" }},
		{"version 0", func(c *store.Connection) { c.Version = 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.change(&c)
			wantErr(t, "PutConnection", s.PutConnection(ctx, c), store.ErrInvalid)
			c.Version++
			wantErr(t, "UpdateConnection", s.UpdateConnection(ctx, c), store.ErrInvalid)
		})
	}
	goodState := connectionState("st_1", "acme", t0.Add(time.Hour))
	for _, tc := range []struct {
		name   string
		change func(*store.ConnectionState)
	}{
		{"no state", func(s *store.ConnectionState) { s.State = "" }},
		{"no org", func(s *store.ConnectionState) { s.Org = "" }},
		{"no provider", func(s *store.ConnectionState) { s.ProviderID = "" }},
		{"no verifier", func(s *store.ConnectionState) { s.VerifierSealed = "" }},
		{"no key id", func(s *store.ConnectionState) { s.KeyID = "" }},
		{"unknown owner kind", func(s *store.ConnectionState) { s.OwnerKind = "team" }},
		{"org owner with a ref", func(s *store.ConnectionState) { s.OwnerKind = store.OwnerOrg }},
		{"user owner without a ref", func(s *store.ConnectionState) { s.OwnerRef = "" }},
		{"no expiry", func(s *store.ConnectionState) { s.ExpiresAt = time.Time{} }},
	} {
		t.Run("state "+tc.name, func(t *testing.T) {
			st := goodState
			tc.change(&st)
			wantErr(t, "PutConnectionState", s.PutConnectionState(ctx, st), store.ErrInvalid)
		})
	}
	list, err := s.ListConnections(ctx, "acme")
	if err != nil || len(list) != 0 {
		t.Fatalf("connections after refused puts: %+v, %v", list, err)
	}
	_, err = s.TakeConnectionState(ctx, "st_1", t0)
	wantErr(t, "the refused state", err, store.ErrNotFound)
}

func testConnectionStateTake(t *testing.T, s store.Store) {
	ctx := context.Background()
	org := connectionState("st_org", "acme", t0.Add(10*time.Minute))
	org.OwnerKind, org.OwnerRef = store.OwnerOrg, ""
	user := connectionState("st_user", "acme", t0.Add(10*time.Minute))
	expired := connectionState("st_old", "acme", t0.Add(-time.Second))
	atNow := connectionState("st_now", "acme", t0)
	for _, st := range []store.ConnectionState{org, user, expired, atNow} {
		if err := s.PutConnectionState(ctx, st); err != nil {
			t.Fatalf("PutConnectionState(%s): %v", st.State, err)
		}
	}
	dup := connectionState("st_user", "other", t0.Add(time.Hour))
	wantErr(t, "PutConnectionState of a stored state", s.PutConnectionState(ctx, dup), store.ErrConflict)

	for _, want := range []store.ConnectionState{org, user} {
		got, err := s.TakeConnectionState(ctx, want.State, t0)
		if err != nil {
			t.Fatalf("TakeConnectionState(%s): %v", want.State, err)
		}
		equal(t, "taken", got, want) // the first put, not the refused duplicate
		_, err = s.TakeConnectionState(ctx, want.State, t0)
		wantErr(t, "second take of "+want.State, err, store.ErrNotFound)
	}
	for _, st := range []string{"st_old", "st_now", "st_none"} {
		_, err := s.TakeConnectionState(ctx, st, t0)
		wantErr(t, "take of "+st, err, store.ErrNotFound)
	}
	// The expired ones were deleted by the take: nothing is left to prune.
	if n, err := s.PruneConnectionStates(ctx, t0.Add(24*time.Hour)); err != nil || n != 0 {
		t.Fatalf("PruneConnectionStates after the takes = %d, %v; want 0", n, err)
	}
}

// testConnectionStateTakeConcurrent: callbacks racing with the same state: one gets it.
func testConnectionStateTakeConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	st := connectionState("st_1", "acme", t0.Add(time.Hour))
	if err := s.PutConnectionState(ctx, st); err != nil {
		t.Fatalf("PutConnectionState: %v", err)
	}
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.TakeConnectionState(ctx, "st_1", t0)
			if err == nil && got.State != "st_1" {
				err = fmt.Errorf("took %+v", got)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrNotFound):
			t.Fatalf("take %d: %v, want ErrNotFound", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d takes got the state, want exactly 1", won)
	}
}

func testConnectionStatePrune(t *testing.T, s store.Store) {
	ctx := context.Background()
	for i, exp := range []time.Duration{-time.Hour, -time.Second, 0, time.Second, time.Hour} {
		if err := s.PutConnectionState(ctx, connectionState(fmt.Sprintf("st_%d", i), "acme", t0.Add(exp))); err != nil {
			t.Fatalf("PutConnectionState: %v", err)
		}
	}
	for _, tc := range []struct {
		now  time.Time
		want int64
	}{
		{t0.Add(-2 * time.Hour), 0},
		{t0, 3}, // expired at now: -1h, -1s and 0
		{t0, 0},
		{t0.Add(2 * time.Hour), 2},
	} {
		n, err := s.PruneConnectionStates(ctx, tc.now)
		if err != nil || n != tc.want {
			t.Fatalf("PruneConnectionStates(%v) = %d, %v; want %d", tc.now, n, err, tc.want)
		}
	}
	_, err := s.TakeConnectionState(ctx, "st_4", t0)
	wantErr(t, "take of a pruned state", err, store.ErrNotFound)
}

// testMCPServerOAuth: a server's OAuth document round-trips byte for byte through
// registration and sync; none stays nil; one that is not JSON is refused.
func testMCPServerOAuth(t *testing.T, s store.Store) {
	ctx := context.Background()
	tool := store.MCPTool{Ref: "gh:issues@1", Name: "issues", Pin: "sha256:1"}
	mcpServer := func(id string, gen int64) store.MCPServer { return mcpServer(id, gen, tool) }
	srv := mcpServer("gh", 1)
	srv.Auth = "oauth"
	srv.OAuth = json.RawMessage(`{"issuer": "https://auth.example.test",  "clientId":"xema", "clientSecret":"sb1.k1.s"}`)
	if err := s.SaveMCPServer(ctx, srv, biome("gh", "1.0.1", "h1"), nil, nil); err != nil {
		t.Fatalf("SaveMCPServer: %v", err)
	}
	plain := mcpServer("plain", 1)
	if err := s.SaveMCPServer(ctx, plain, biome("plain", "1.0.1", "hp"), nil, nil); err != nil {
		t.Fatalf("SaveMCPServer plain: %v", err)
	}
	got, err := s.GetMCPServer(ctx, "gh")
	if err != nil {
		t.Fatalf("GetMCPServer: %v", err)
	}
	equal(t, "oauth server", got, srv)
	if string(got.OAuth) != string(srv.OAuth) {
		t.Fatalf("OAuth %s, want %s byte for byte", got.OAuth, srv.OAuth)
	}
	if got, err := s.GetMCPServer(ctx, "plain"); err != nil || got.OAuth != nil {
		t.Fatalf("server without OAuth: %s, %v; want nil", got.OAuth, err)
	}

	// A later generation's save leaves the document as stored, whatever it carries: a sync
	// holds the one it read, which a key rotation (ResealMCPServerOAuth) may have resealed
	// meanwhile. (Until this, a sync could put the old key's document back.)
	srv2 := mcpServer("gh", 2)
	srv2.Auth, srv2.OAuth = "oauth", json.RawMessage(`{"issuer":"https://auth2.example.test"}`)
	if err := s.SaveMCPServer(ctx, srv2, biome("gh", "1.0.2", "h2"), nil, nil); err != nil {
		t.Fatalf("SaveMCPServer gen 2: %v", err)
	}
	plain2 := mcpServer("plain", 2)
	plain2.Auth, plain2.OAuth = "oauth", json.RawMessage(`{}`)
	if err := s.SaveMCPServer(ctx, plain2, biome("plain", "1.0.2", "hp2"), nil, nil); err != nil {
		t.Fatalf("SaveMCPServer plain gen 2: %v", err)
	}
	list, err := s.ListMCPServers(ctx)
	if err != nil {
		t.Fatalf("ListMCPServers: %v", err)
	}
	kept, plainKept := srv2, plain2
	kept.OAuth, plainKept.OAuth = srv.OAuth, nil
	equal(t, "servers", list, []store.MCPServer{kept, plainKept})
	srv3 := mcpServer("gh", 3)
	if err := s.SaveMCPServer(ctx, srv3, biome("gh", "1.0.3", "h3"), nil, nil); err != nil {
		t.Fatalf("SaveMCPServer gen 3: %v", err)
	}
	if got, err := s.GetMCPServer(ctx, "gh"); err != nil || string(got.OAuth) != string(srv.OAuth) {
		t.Fatalf("server after a save carrying no OAuth: %s, %v; want the stored document", got.OAuth, err)
	}

	bad := mcpServer("bad", 1)
	bad.OAuth = json.RawMessage(`{"issuer":`)
	wantErr(t, "SaveMCPServer with OAuth not JSON", s.SaveMCPServer(ctx, bad, biome("bad", "1.0.1", "hb"), nil, nil), store.ErrInvalid)
	_, err = s.GetMCPServer(ctx, "bad")
	wantErr(t, "the refused server", err, store.ErrNotFound)
}

// testMCPServerOAuthReseal: key rotation replaces the servers' OAuth documents all or none,
// passes only servers that have one, and keeps their generation.
func testMCPServerOAuthReseal(t *testing.T, s store.Store) {
	ctx := context.Background()
	tool := store.MCPTool{Ref: "gh:issues@1", Name: "issues", Pin: "sha256:1"}
	withSecret := mcpServer("gh", 1, tool)
	withSecret.Auth, withSecret.OAuth = "oauth", json.RawMessage(`{"clientId":"xema", "clientSecretSealed":"sb1.k1.s"}`)
	public := mcpServer("linear", 1, tool)
	public.Auth, public.OAuth = "oauth", json.RawMessage(`{"clientId":"pub"}`)
	plain := mcpServer("plain", 1, tool)
	for i, srv := range []store.MCPServer{withSecret, public, plain} {
		if err := s.SaveMCPServer(ctx, srv, biome(srv.ProviderID, "1.0.1", fmt.Sprint("h", i)), nil, nil); err != nil {
			t.Fatalf("SaveMCPServer %s: %v", srv.ProviderID, err)
		}
	}
	unchanged := func(what string) {
		t.Helper()
		list, err := s.ListMCPServers(ctx)
		if err != nil {
			t.Fatalf("ListMCPServers: %v", err)
		}
		equal(t, what, list, []store.MCPServer{withSecret, public, plain})
	}

	// An error on the second leaves the first unchanged; so does a document not JSON.
	boom := errors.New("boom")
	var passed []string
	_, err := s.ResealMCPServerOAuth(ctx, func(srv store.MCPServer) (json.RawMessage, error) {
		passed = append(passed, srv.ProviderID)
		if len(passed) == 2 {
			return nil, boom
		}
		return json.RawMessage(`{"clientSecretSealed":"sb1.k2.s"}`), nil
	})
	wantErr(t, "ResealMCPServerOAuth failing on the second", err, boom)
	unchanged("after the failed reseal")
	equal(t, "servers passed", passed, []string{"gh", "linear"})
	_, err = s.ResealMCPServerOAuth(ctx, func(srv store.MCPServer) (json.RawMessage, error) {
		if srv.ProviderID == "linear" {
			return json.RawMessage(`{"clientId":`), nil
		}
		return json.RawMessage(`{"clientSecretSealed":"sb1.k2.s"}`), nil
	})
	wantErr(t, "ResealMCPServerOAuth with a document not JSON", err, store.ErrInvalid)
	unchanged("after the refused reseal")

	// A nil document leaves its server as it is, uncounted.
	resealed := json.RawMessage(`{"clientId":"xema","clientSecretSealed":"sb1.k2.s2","keyId":"k2"}`)
	n, err := s.ResealMCPServerOAuth(ctx, func(srv store.MCPServer) (json.RawMessage, error) {
		if srv.ProviderID == "gh" {
			return resealed, nil
		}
		return nil, nil
	})
	if err != nil || n != 1 {
		t.Fatalf("ResealMCPServerOAuth = %d, %v; want 1", n, err)
	}
	want := withSecret
	want.OAuth = resealed
	got, err := s.GetMCPServer(ctx, "gh")
	if err != nil {
		t.Fatalf("GetMCPServer: %v", err)
	}
	equal(t, "resealed", got, want)
	if got, err := s.GetMCPServer(ctx, "linear"); err != nil || string(got.OAuth) != string(public.OAuth) {
		t.Fatalf("the server left as it was: %s, %v", got.OAuth, err)
	}
	// The generation is kept: the next sync still applies.
	next := mcpServer("gh", 2, tool)
	next.Auth, next.OAuth = "oauth", resealed
	if err := s.SaveMCPServer(ctx, next, biome("gh", "1.0.2", "h9"), nil, nil); err != nil {
		t.Fatalf("SaveMCPServer after the reseal: %v", err)
	}
}

// testCredentialWithConnections: an OAuth credential is not deleted while a connection to it
// holds tokens (nobody could revoke them then); once disconnected, it is.
func testCredentialWithConnections(t *testing.T, s store.Store) {
	ctx := context.Background()
	c := credential("cred_gh", "acme")
	c.OAuth = json.RawMessage(`{"owner":"user","clientId":"x"}`)
	mustPutCredential(t, s, c)
	mustPutConnection(t, s, connection("con_1", "acme", c.ID, store.OwnerUser, "user:alice"))
	wantErr(t, "DeleteCredential with a connection", s.DeleteCredential(ctx, c.ID), store.ErrConflict)
	if _, err := s.GetCredential(ctx, c.ID); err != nil {
		t.Fatalf("the refused delete removed the credential: %v", err)
	}
	if _, err := s.DeleteConnection(ctx, "acme", "con_1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteCredential(ctx, c.ID); err != nil {
		t.Fatalf("DeleteCredential once disconnected: %v", err)
	}
}
