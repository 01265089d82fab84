package credential_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/secretbox"
	"github.com/xemahq/xema/internal/store/sqlite"
)

const secret = "ghp_0123456789abcdefTOPSECRET"

func vault(t *testing.T) (*credential.Vault, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "xema.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keys, err := credential.OpenKeys(dir, secretbox.Source{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &credential.Vault{Store: st, Keys: keys}, dir
}

func TestKeyFileCreatedPrivate(t *testing.T) {
	_, dir := vault(t)
	fi, err := os.Stat(filepath.Join(dir, credential.KeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %o, want 600", fi.Mode().Perm())
	}
}

func TestSealedAtRestAndOpens(t *testing.T) {
	v, dir := vault(t)
	ctx := context.Background()
	meta, err := v.Create(ctx, credential.New{Org: "acme", Name: "ci", Provider: "github", Secret: credential.NewSecret(secret)}, "user:alice")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(meta)
	if strings.Contains(string(raw), secret) {
		t.Fatalf("metadata holds the secret: %s", raw)
	}
	for _, name := range []string{"xema.db", "xema.db-wal"} {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		if bytes.Contains(b, []byte(secret)) {
			t.Fatalf("%s holds the plaintext", name)
		}
	}
	got, err := v.Open(ctx, meta.ID)
	if err != nil || got.Reveal() != secret {
		t.Fatalf("Open = %v, %v", got, err)
	}
}

func TestSecretRedacts(t *testing.T) {
	s := credential.NewSecret(secret)
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "token", s)
	j, _ := json.Marshal(map[string]any{"token": s})
	for what, out := range map[string]string{
		"%v": fmt.Sprintf("%v", s), "%+v": fmt.Sprintf("%+v", s), "%#v": fmt.Sprintf("%#v", s),
		"json": string(j), "slog": logs.String(),
	} {
		if strings.Contains(out, secret) || !strings.Contains(out, "[redacted]") {
			t.Errorf("%s prints %q", what, out)
		}
	}
}

func TestCreateRefusesBadInput(t *testing.T) {
	v, _ := vault(t)
	for _, in := range []credential.New{
		{Org: "acme", Provider: "github"},
		{Org: "acme", Provider: "github", Secret: credential.NewSecret(strings.Repeat("x", credential.MaxSecretBytes+1))},
		{Org: "acme", Provider: "github", Name: "bad\nname", Secret: credential.NewSecret(secret)},
	} {
		_, err := v.Create(context.Background(), in, "user:alice")
		if err == nil || !strings.Contains(err.Error(), credential.CodeInvalid) || strings.Contains(err.Error(), secret) {
			t.Errorf("Create(%q) = %v", in.Name, err)
		}
	}
}

// TestRotate: after rotation every credential opens, is sealed under the new key, and after
// --prune the old key is gone from the file.
func TestRotate(t *testing.T) {
	v, dir := vault(t)
	ctx := context.Background()
	var ids []string
	for i := range 3 {
		m, err := v.Create(ctx, credential.New{Org: "acme", Provider: "gitea", Secret: credential.NewSecret(fmt.Sprint(secret, i))}, "u")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	if m, err := v.Get(ctx, ids[0]); err != nil || m.RotatedAt != "" {
		t.Fatalf("a credential never rotated says rotated at %q (%v)", m.RotatedAt, err)
	}
	oldKey, _ := os.ReadFile(filepath.Join(dir, credential.KeyFileName))
	rot, err := v.Rotate(ctx, true)
	if err != nil || rot.String() != "3 credential(s)" {
		t.Fatalf("Rotate = %+v, %v", rot, err)
	}
	kid := rot.KeyID
	newKey, _ := os.ReadFile(filepath.Join(dir, credential.KeyFileName))
	if bytes.Contains(newKey, bytes.TrimSpace(oldKey)) || strings.Count(strings.TrimSpace(string(newKey)), "\n") != 0 {
		t.Fatalf("pruned key file still holds the old key or more than one: %q", newKey)
	}
	for i, id := range ids {
		m, err := v.Get(ctx, id)
		if err != nil || m.KeyID != kid || m.RotatedAt == "" || m.RotatedAt < m.CreatedAt {
			t.Fatalf("credential %s: key %s rotated at %q (%v), want %s rotated after its creation %s", id, m.KeyID, m.RotatedAt, err, kid, m.CreatedAt)
		}
		got, err := v.Open(ctx, id)
		if err != nil || got.Reveal() != fmt.Sprint(secret, i) {
			t.Fatalf("Open after rotation: %v", err)
		}
	}
}

// TestOAuthClientSecretSealedApart: an OAuth credential's client secret opens only as what
// it is: not as a static credential's token (what a replica of the previous release would
// open it as, then send to the provider), nor once its OAuth description is changed.
func TestOAuthClientSecretSealedApart(t *testing.T) {
	ctx := context.Background()
	v, _ := vault(t)
	oauth := json.RawMessage(`{"owner":"org","clientId":"x","authorizationEndpoint":"https://gh.example/a","tokenEndpoint":"https://gh.example/t"}`)
	m, err := v.Create(ctx, credential.New{Org: "acme", Provider: "github", Secret: credential.NewSecret("client-s3cret"), OAuth: oauth}, "user:alice")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := v.Open(ctx, m.ID); err != nil || got.Reveal() != "client-s3cret" {
		t.Fatalf("Open: %v", err)
	}
	c, err := v.Store.GetCredential(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	kr, err := v.Keys.Current()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kr.Open(c.Sealed, []byte("credential:"+m.ID)); err == nil {
		t.Fatal("the client secret opens as a static credential's token")
	}
	c.OAuth = json.RawMessage(`{"owner":"org","clientId":"x","authorizationEndpoint":"https://evil.example/a","tokenEndpoint":"https://evil.example/t"}`)
	if _, err := credential.Unseal(kr, c); err == nil {
		t.Fatal("the client secret opens under another OAuth description")
	}
}
