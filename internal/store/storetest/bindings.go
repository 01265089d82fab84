package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// runBindings is the conformance suite of store.BindingStore.
func runBindings(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"CredentialRoundTrip", testCredentialRoundTrip},
		{"BindingRoundTrip", testBindingRoundTrip},
		{"BindingNeedsKnownCredential", testBindingUnknownCredential},
		{"BindingScopeIsUnique", testBindingScopeUnique},
		{"CredentialInUseCannotBeDeleted", testCredentialInUse},
		{"ResealIsAtomic", testResealAtomic},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}

func credential(id, org string) store.Credential {
	return store.Credential{ID: id, Org: org, Name: "ci token", Provider: "gitea", Sealed: "sb1.k1." + id,
		KeyID: "k1", CreatedBy: "user:admin", CreatedAt: t0}
}

func binding(id, org, project, credID string) store.Binding {
	return store.Binding{ID: id, Org: org, Project: project, Environment: "project", RefPattern: "connector:scm.*",
		Provider: "gitea", BaseURL: "http://127.0.0.1:3000", CredentialID: credID,
		Config: json.RawMessage(`{"repository": "acme/app"}`), CreatedBy: "user:admin", CreatedAt: t0}
}

func mustPutCredential(t *testing.T, s store.Store, c store.Credential) {
	t.Helper()
	if err := s.PutCredential(context.Background(), c); err != nil {
		t.Fatalf("PutCredential(%s): %v", c.ID, err)
	}
}

func testCredentialRoundTrip(t *testing.T, s store.Store) {
	ctx := context.Background()
	c := credential("cred_1", "acme")
	mustPutCredential(t, s, c)
	mustPutCredential(t, s, credential("cred_2", "other"))
	got, err := s.GetCredential(ctx, "cred_1")
	if err != nil {
		t.Fatalf("GetCredential: %v", err)
	}
	equal(t, "credential", got, c)
	wantErr(t, "PutCredential same id", s.PutCredential(ctx, c), store.ErrConflict)
	_, err = s.GetCredential(ctx, "cred_none")
	wantErr(t, "GetCredential unknown", err, store.ErrNotFound)
	bad := c
	bad.ID, bad.Sealed = "cred_3", ""
	wantErr(t, "PutCredential without Sealed", s.PutCredential(ctx, bad), store.ErrInvalid)
	bad = c
	bad.ID, bad.OAuth = "cred_4", json.RawMessage(`{"owner":`)
	wantErr(t, "PutCredential with OAuth not JSON", s.PutCredential(ctx, bad), store.ErrInvalid)

	// An OAuth credential keeps its authorization server byte for byte.
	o := credential("cred_oauth", "elsewhere")
	o.OAuth = json.RawMessage(`{"owner":"user","tokenEndpoint":"https://as.example/token"}`)
	mustPutCredential(t, s, o)
	if got, err := s.GetCredential(ctx, o.ID); err != nil || string(got.OAuth) != string(o.OAuth) {
		t.Fatalf("GetCredential of an OAuth credential: %+v, %v", got, err)
	}

	acme, err := s.ListCredentials(ctx, "acme")
	if err != nil {
		t.Fatalf("ListCredentials: %v", err)
	}
	equal(t, "credentials of acme", acme, []store.Credential{c})
	all, err := s.ListCredentials(ctx, "")
	if err != nil {
		t.Fatalf("ListCredentials all: %v", err)
	}
	equal(t, "count of all credentials", len(all), 3)

	wantErr(t, "DeleteCredential unknown", s.DeleteCredential(ctx, "cred_none"), store.ErrNotFound)
	if err := s.DeleteCredential(ctx, "cred_2"); err != nil {
		t.Fatalf("DeleteCredential: %v", err)
	}
	_, err = s.GetCredential(ctx, "cred_2")
	wantErr(t, "GetCredential deleted", err, store.ErrNotFound)
}

func testBindingRoundTrip(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustPutCredential(t, s, credential("cred_1", "acme"))
	b := binding("bnd_1", "acme", "p1", "cred_1")
	chat := binding("bnd_2", "acme", "", "cred_1")
	chat.RefPattern, chat.Conversation, chat.Provider, chat.Environment = "connector:channel.*", "support", "telegram", ""
	chat.Config = json.RawMessage(`{"chatId":"-100"}`)
	for _, x := range []store.Binding{b, chat} {
		if err := s.PutBinding(ctx, x, ""); err != nil {
			t.Fatalf("PutBinding(%s): %v", x.ID, err)
		}
	}
	got, err := s.GetBinding(ctx, "bnd_1")
	if err != nil {
		t.Fatalf("GetBinding: %v", err)
	}
	equal(t, "binding", got, b)
	list, err := s.ListBindings(ctx, "acme")
	if err != nil {
		t.Fatalf("ListBindings: %v", err)
	}
	equal(t, "bindings of acme", list, []store.Binding{b, chat})
	none, err := s.ListBindings(ctx, "other")
	if err != nil {
		t.Fatalf("ListBindings other: %v", err)
	}
	equal(t, "bindings of another org", len(none), 0)

	wantErr(t, "PutBinding same id", s.PutBinding(ctx, b, ""), store.ErrConflict)
	bad := b
	bad.ID, bad.Config = "bnd_3", json.RawMessage(`{`)
	wantErr(t, "PutBinding bad config", s.PutBinding(ctx, bad, ""), store.ErrInvalid)

	// A change replaces a binding in one transaction: another org's id, an unknown one, or a
	// replacement that cannot be stored leaves the old binding in place.
	changed := b
	changed.ID, changed.BaseURL = "bnd_4", "https://scm.example.test/v2"
	other := changed
	other.Org = "other"
	wantErr(t, "PutBinding replacing another org's", s.PutBinding(ctx, other, "bnd_1"), store.ErrNotFound)
	wantErr(t, "PutBinding replacing an unknown one", s.PutBinding(ctx, changed, "bnd_none"), store.ErrNotFound)
	wantErr(t, "PutBinding replacing with a bad config", s.PutBinding(ctx, bad, "bnd_1"), store.ErrInvalid)
	sameKey := changed
	sameKey.ID = "bnd_5"
	wantErr(t, "PutBinding replacing, colliding with another binding", s.PutBinding(ctx, sameKey, "bnd_2"), store.ErrConflict)
	if got, err := s.GetBinding(ctx, "bnd_1"); err != nil || got.BaseURL != b.BaseURL {
		t.Fatalf("the old binding after failed changes: %+v, %v", got, err)
	}
	if err := s.PutBinding(ctx, changed, "bnd_1"); err != nil {
		t.Fatalf("PutBinding replacing bnd_1: %v", err)
	}
	list, err = s.ListBindings(ctx, "acme")
	if err != nil || len(list) != 2 || list[0].ID != "bnd_2" || list[1].ID != "bnd_4" {
		t.Fatalf("bindings after the change: %+v, %v", list, err)
	}
	if err := s.DeleteBinding(ctx, "bnd_4"); err != nil {
		t.Fatalf("DeleteBinding: %v", err)
	}
	if err := s.DeleteBinding(ctx, "bnd_1"); err == nil {
		t.Fatal("DeleteBinding of the replaced binding succeeded")
	}
	_, err = s.GetBinding(ctx, "bnd_4")
	wantErr(t, "GetBinding deleted", err, store.ErrNotFound)
	wantErr(t, "DeleteBinding again", s.DeleteBinding(ctx, "bnd_4"), store.ErrNotFound)
}

func testBindingUnknownCredential(t *testing.T, s store.Store) {
	ctx := context.Background()
	wantErr(t, "PutBinding unknown credential", s.PutBinding(ctx, binding("bnd_1", "acme", "", "cred_none"), ""), store.ErrNotFound)
	list, err := s.ListBindings(ctx, "")
	if err != nil {
		t.Fatalf("ListBindings: %v", err)
	}
	equal(t, "bindings after refused put", len(list), 0)
}

func testBindingScopeUnique(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustPutCredential(t, s, credential("cred_1", "acme"))
	if err := s.PutBinding(ctx, binding("bnd_1", "acme", "p1", "cred_1"), ""); err != nil {
		t.Fatalf("PutBinding: %v", err)
	}
	wantErr(t, "PutBinding same scope", s.PutBinding(ctx, binding("bnd_2", "acme", "p1", "cred_1"), ""), store.ErrConflict)
	if err := s.PutBinding(ctx, binding("bnd_3", "acme", "p2", "cred_1"), ""); err != nil {
		t.Fatalf("PutBinding other project: %v", err)
	}
}

func testCredentialInUse(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustPutCredential(t, s, credential("cred_1", "acme"))
	if err := s.PutBinding(ctx, binding("bnd_1", "acme", "", "cred_1"), ""); err != nil {
		t.Fatalf("PutBinding: %v", err)
	}
	wantErr(t, "DeleteCredential in use", s.DeleteCredential(ctx, "cred_1"), store.ErrConflict)
	if err := s.DeleteBinding(ctx, "bnd_1"); err != nil {
		t.Fatalf("DeleteBinding: %v", err)
	}
	if err := s.DeleteCredential(ctx, "cred_1"); err != nil {
		t.Fatalf("DeleteCredential after unbinding: %v", err)
	}
}

func testResealAtomic(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, id := range []string{"cred_a", "cred_b", "cred_c"} {
		mustPutCredential(t, s, credential(id, "acme"))
	}
	boom := errors.New("boom")
	_, err := s.ResealCredentials(ctx, t0, func(c store.Credential) (string, string, error) {
		if c.ID == "cred_c" {
			return "", "", boom
		}
		return "sb1.k2." + c.ID, "k2", nil
	})
	wantErr(t, "failing reseal", err, boom)
	for _, id := range []string{"cred_a", "cred_b", "cred_c"} {
		c, err := s.GetCredential(ctx, id)
		if err != nil {
			t.Fatalf("GetCredential: %v", err)
		}
		equal(t, "key id after failed reseal of "+id, c.KeyID, "k1")
		equal(t, "never rotated: "+id, c.RotatedAt, time.Time{})
	}
	n, err := s.ResealCredentials(ctx, t0.Add(time.Hour), func(c store.Credential) (string, string, error) {
		return "sb1.k2." + c.ID, "k2", nil
	})
	if err != nil {
		t.Fatalf("ResealCredentials: %v", err)
	}
	equal(t, "resealed", n, 3)
	for _, id := range []string{"cred_a", "cred_b", "cred_c"} {
		c, err := s.GetCredential(ctx, id)
		if err != nil {
			t.Fatalf("GetCredential: %v", err)
		}
		equal(t, "resealed "+id, fmt.Sprint(c.KeyID, " ", c.Sealed), "k2 sb1.k2."+id)
		equal(t, "rotated "+id, c.RotatedAt, t0.Add(time.Hour))
	}
	// Sealed again under the same key: not a rotation.
	if _, err := s.ResealCredentials(ctx, t0.Add(2*time.Hour), func(c store.Credential) (string, string, error) {
		return "sb1.k2.again." + c.ID, "k2", nil
	}); err != nil {
		t.Fatalf("ResealCredentials under the same key: %v", err)
	}
	if c, err := s.GetCredential(ctx, "cred_a"); err != nil || !c.RotatedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after a reseal under the same key: %+v, %v; want rotated at %v still", c.RotatedAt, err, t0.Add(time.Hour))
	}
}
