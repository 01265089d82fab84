package connection_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/connection"
	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/secretbox"
	"github.com/xemahq/xema/internal/store"
)

// seal seals plaintext with kr or fails the test.
func seal(t *testing.T, kr *secretbox.Keyring, plaintext string, aad []byte) string {
	t.Helper()
	s, err := kr.Seal([]byte(plaintext), aad)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// putConnection stores a connected org connection to providerID holding access and refresh
// (sealed with kr), expiring at expires.
func putConnection(t *testing.T, st store.Store, kr *secretbox.Keyring, providerID, access, refresh string, expires time.Time) store.Connection {
	t.Helper()
	c := store.Connection{ID: "con_" + providerID, Org: org, ProviderID: providerID, OwnerKind: store.OwnerOrg,
		Status: store.ConnectionConnected, KeyID: kr.KeyID(), ExpiresAt: expires, Version: 1, CreatedBy: "user:admin",
		CreatedAt: time.Now()}
	c.AccessSealed = seal(t, kr, access, connection.TokenAAD("access", c))
	if refresh != "" {
		c.RefreshSealed = seal(t, kr, refresh, connection.TokenAAD("refresh", c))
	}
	if err := st.PutConnection(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRotateKeyReseals: `xema credential rotate-key --prune` (credential.Vault.Rotate with
// connection.Resealers) reseals the connections' tokens and the servers' client secrets with
// the credentials, so that once the old key is pruned the gateway still opens all of them. A
// kind that fails keeps the old keys.
func TestRotateKeyReseals(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	st := newStore(t)
	keys, err := credential.OpenKeys(dir, secretbox.Source{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	old, err := keys.Current()
	if err != nil {
		t.Fatal(err)
	}
	v := &credential.Vault{Store: st, Keys: keys}
	if _, err := v.Create(ctx, credential.New{Org: org, Provider: "gitea", Secret: credential.NewSecret("cred")}, "user:admin"); err != nil {
		t.Fatal(err)
	}
	const resource = "https://mcp.example/mcp"
	confidential := connection.Server{Owner: store.OwnerOrg, Resource: resource, Issuer: "https://as.example",
		AuthorizationEndpoint: "https://as.example/authorize", TokenEndpoint: "https://as.example/token",
		ClientID: "xema", ClientSecretSealed: seal(t, old, "client-secret", connection.ClientSecretAAD(resource)),
		KeyID: old.KeyID(), TokenAuthMethod: "client_secret_basic"}
	saveServer(t, st, "tools", confidential)
	public := confidential
	public.Resource, public.ClientSecretSealed, public.KeyID, public.TokenAuthMethod = "https://public.example/mcp", "", "", "none"
	saveServer(t, st, "public", public)
	putConnection(t, st, old, "tools", "access-token", "refresh-token", time.Now().Add(24*time.Hour))
	putConnection(t, st, old, "public", "public-access", "", time.Time{})

	// A kind that fails: nothing pruned, everything still opens.
	boom := errors.New("boom")
	failing := append(connection.Resealers(st), credential.Resealer{Kind: "thing(s)",
		Reseal: func(context.Context, *secretbox.Keyring) (int, error) { return 0, boom }})
	if _, err := v.Rotate(ctx, true, failing...); !errors.Is(err, boom) {
		t.Fatalf("a rotation with a failing kind: %v, want boom", err)
	}
	mid, err := keys.Current()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mid.Open(confidential.ClientSecretSealed, connection.ClientSecretAAD(resource)); err != nil {
		t.Fatalf("the old key was pruned after a failed rotation: %v", err)
	}

	rot, err := v.Rotate(ctx, true, connection.Resealers(st)...)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rot.String(), "1 credential(s), 2 connection(s), 1 server client secret(s)"; got != want {
		t.Errorf("resealed %q, want %q", got, want)
	}
	kr, err := keys.Current()
	if err != nil {
		t.Fatal(err)
	}
	if kr.KeyID() != rot.KeyID || kr.KeyID() == old.KeyID() {
		t.Fatalf("key %s after the rotation to %s (old %s)", kr.KeyID(), rot.KeyID, old.KeyID())
	}
	if _, err := kr.Open(confidential.ClientSecretSealed, connection.ClientSecretAAD(resource)); err == nil {
		t.Fatal("the old key still opens a value sealed under it: not pruned")
	}

	// The gateway's own paths open the tokens and the client secret under the new key alone.
	svc, err := connection.New(connection.Config{Store: st, Keyring: keys.Current, HTTP: http.DefaultClient,
		PublicURL: "https://gateway.example"})
	if err != nil {
		t.Fatal(err)
	}
	for provider, want := range map[string]string{"tools": "access-token", "public": "public-access"} {
		tok, _, err := svc.Token(ctx, org, provider, connection.Owner{Kind: store.OwnerOrg})
		if err != nil || tok.Reveal() != want {
			t.Errorf("the token of %s after the rotation: %v", provider, err)
		}
	}
	c, err := st.GetConnection(ctx, org, "tools", store.OwnerOrg, "")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := kr.Open(c.RefreshSealed, connection.TokenAAD("refresh", c)); err != nil || string(r) != "refresh-token" || c.KeyID != kr.KeyID() {
		t.Errorf("the refresh token after the rotation: key %s, %v", c.KeyID, err)
	}
	m, err := st.GetMCPServer(ctx, "tools")
	if err != nil {
		t.Fatal(err)
	}
	var srv connection.Server
	if err := json.Unmarshal(m.OAuth, &srv); err != nil {
		t.Fatal(err)
	}
	if secret, err := connection.ClientSecret(kr, srv); err != nil || secret != "client-secret" || srv.KeyID != kr.KeyID() {
		t.Errorf("the client secret after the rotation: key %s, %v", srv.KeyID, err)
	}
	if m, err := st.GetMCPServer(ctx, "public"); err != nil || m.Generation != 1 {
		t.Errorf("the public client's server: generation %d, %v", m.Generation, err)
	}
}
