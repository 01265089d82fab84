package binding_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/xemahq/xema/internal/binding"
	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/connector/tracker"
	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/kernel"
	"github.com/xemahq/xema/internal/runner"
	"github.com/xemahq/xema/internal/secretbox"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/sqlite"
)

// countingStore counts the reads a connector call makes of bindings and credentials.
type countingStore struct {
	store.BindingStore
	lists, gets atomic.Int32
}

func (c *countingStore) ListBindings(ctx context.Context, org string) ([]store.Binding, error) {
	c.lists.Add(1)
	return c.BindingStore.ListBindings(ctx, org)
}

func (c *countingStore) GetCredential(ctx context.Context, id string) (store.Credential, error) {
	c.gets.Add(1)
	return c.BindingStore.GetCredential(ctx, id)
}

// TestOneReadPerCall: a connector call's decision (Connection), resolve and run read the
// org's bindings once and the credential once, the funnel carrying the decision's read to
// resolve and the run (runner.WithDecided); without it, resolve reads both again (the run
// always takes the credential resolve read).
func TestOneReadPerCall(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "xema.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keys, err := credential.OpenKeys(dir, secretbox.Source{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	gh := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"number":1,"html_url":"https://github.example/i/1","title":"t","state":"open","created_at":"2026-12-06T00:00:00Z"}`))
	}))
	t.Cleanup(gh.Close)
	counting := &countingStore{BindingStore: st}
	vault := &credential.Vault{Store: st, Keys: keys}
	svc := &binding.Service{Store: counting, Vault: vault, Providers: binding.Providers(), HTTP: gh.Client()}
	ec := identity.ExecContext{Org: "acme", Subject: identity.Subject{Kind: "workflow", Ref: "workflow:w"}, Environment: "project"}
	cred, err := vault.Create(ctx, credential.New{Org: "acme", Provider: "github", Secret: credential.NewSecret("ghp_x")}, "user:alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Create(ctx, identity.ExecContext{Org: "acme", Subject: identity.Subject{Kind: "user", Ref: "user:alice"}},
		binding.Spec{RefPattern: "connector:*", Provider: "github", BaseURL: gh.URL, CredentialID: cred.ID,
			Config: json.RawMessage(`{"repository":"xema/app"}`)}); err != nil {
		t.Fatal(err)
	}
	entry := &catalog.Entry{Capability: store.Capability{Ref: tracker.RefCreateIssue}}
	call := kernel.Call{Ref: tracker.RefCreateIssue, Input: json.RawMessage(`{"title":"t"}`), Exec: ec}

	for _, tc := range []struct {
		name         string
		carried      bool
		lists, reads int32
	}{
		{"carried", true, 1, 1},
		{"not carried", false, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counting.lists.Store(0)
			counting.gets.Store(0)
			conn, read, err := svc.Connection(ctx, ec, entry)
			if err != nil || conn != nil || read == nil {
				t.Fatalf("Connection of a static credential's ref: %v, %v, %v", conn, read, err)
			}
			rctx := ctx
			if tc.carried {
				rctx = runner.WithDecided(ctx, read)
			}
			run, ok, err := svc.Resolve(rctx, ec, entry)
			if err != nil || !ok {
				t.Fatalf("Resolve: %v %v", ok, err)
			}
			if _, err := run.Run(rctx, call); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if l, g := counting.lists.Load(), counting.gets.Load(); l != tc.lists || g != tc.reads {
				t.Fatalf("%d ListBindings and %d GetCredential; want %d and %d", l, g, tc.lists, tc.reads)
			}
		})
	}
}
