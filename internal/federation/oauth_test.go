package federation

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/catalog"
	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/identity"
	"github.com/xemahq/xema/internal/runner"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/sqlite"
)

// fakeConns answers every owner as connected and counts the reads and the tokens asked.
type fakeConns struct {
	looks int
	reads []*connection.Read // what each TokenFor was given
}

func (f *fakeConns) Discover(context.Context, string, connection.Auth) (connection.Server, error) {
	return connection.Server{}, errors.New("not in this test")
}

func (f *fakeConns) Look(context.Context, string, string, connection.Owner) (*connection.Read, error) {
	f.looks++
	return &connection.Read{Status: connection.StatusConnected, ID: "con_1"}, nil
}

func (f *fakeConns) Token(ctx context.Context, org, providerID string, owner connection.Owner) (credential.Secret, connection.View, error) {
	return f.TokenFor(ctx, org, providerID, owner, nil)
}

func (f *fakeConns) TokenFor(_ context.Context, _, _ string, _ connection.Owner, read *connection.Read) (credential.Secret, connection.View, error) {
	f.reads = append(f.reads, read)
	return credential.NewSecret("token"), connection.View{}, nil
}

func (f *fakeConns) Complete(context.Context, string, string, string, string) (connection.View, error) {
	return connection.View{}, errors.New("not in this test")
}

// TestRunTakesTheDecisionsRead: the connection Connection read for a call's decision is the
// one its runner's token comes from (carried by the gateway with runner.WithDecided), not a
// second read; without one (a sync, a context of no decision) the service reads.
func TestRunTakesTheDecisionsRead(t *testing.T) {
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	conns := &fakeConns{}
	f := New(st, func(context.Context) error { return nil }, nil, Options{Connections: conns})
	t.Cleanup(f.Close)
	auth, _ := json.Marshal(connection.Server{Owner: store.OwnerOrg, Resource: "https://mcp.example/mcp", ClientID: "xema",
		AuthorizationEndpoint: "https://as.example/authorize", TokenEndpoint: "https://as.example/token"})
	const ref = "conn:echo@1"
	srv := store.MCPServer{ProviderID: "conn", Transport: TransportHTTP, URL: "https://mcp.example/mcp", Auth: AuthOAuth, OAuth: auth,
		TimeoutMs: 5000, Tools: []store.MCPTool{{Ref: ref, Name: "echo", Pin: "sha256:1"}}, Generation: 1, Org: "acme",
		RegisteredBy: "user:admin", RegisteredAt: time.Now()}
	bv := store.BiomeVersion{ID: "conn", Version: version(1), Manifest: json.RawMessage(`{"id":"conn"}`), Contributions: json.RawMessage(`[]`),
		ContentHash: "sha256:conn", CreatedAt: time.Now(), Owner: "acme"}
	if err := st.SaveMCPServer(ctx, srv, bv, nil, nil); err != nil {
		t.Fatal(err)
	}
	entry := &catalog.Entry{Capability: store.Capability{Ref: ref, BiomeID: "conn", BiomeVersion: version(1), RunnerKind: RunnerKind}}
	ec := identity.ExecContext{Org: "acme", Subject: identity.Subject{Kind: "agent", Ref: "agent:bot"}}

	in, read, err := f.Connection(ctx, ec, entry)
	if err != nil || in == nil || in.Status != connection.StatusConnected || in.ID != "con_1" || read == nil {
		t.Fatalf("Connection = %+v, %v, %v", in, read, err)
	}
	r, ok, err := f.Resolve(ctx, ec, entry)
	if err != nil || !ok {
		t.Fatalf("Resolve: %v %v", ok, err)
	}
	tr := r.(toolRunner)
	if _, _, err := tr.token(runner.WithDecided(ctx, read)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tr.token(ctx); err != nil {
		t.Fatal(err)
	}
	if conns.looks != 1 || len(conns.reads) != 2 || conns.reads[0] != read.(*connection.Read) || conns.reads[1] != nil {
		t.Fatalf("%d reads for the decision; the runs got %v, want the decision's %p then none", conns.looks, conns.reads, read)
	}
}
