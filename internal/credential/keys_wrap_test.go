package credential_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/credential"
	"github.com/xemahq/xema/internal/masterkey"
	"github.com/xemahq/xema/internal/secretbox"
	"github.com/xemahq/xema/internal/store/sqlite"
)

func masterKey(t *testing.T) masterkey.Wrapper {
	t.Helper()
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	w, err := masterkey.Source{Inline: base64.StdEncoding.EncodeToString(raw[:])}.Open(false)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestKeyFileWrappedByMasterKey: a plain keyring file (an older version's) is wrapped in place
// and keeps opening what it sealed; rotation keeps it wrapped; without the master key, or
// with another, the keyring does not open.
func TestKeyFileWrappedByMasterKey(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "xema.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	plain, err := credential.OpenKeys(dir, secretbox.Source{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := (&credential.Vault{Store: st, Keys: plain}).Create(ctx, credential.New{Org: "acme", Name: "ci", Provider: "github",
		Secret: credential.NewSecret(secret)}, "user:alice")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, credential.KeyFileName)
	before, _ := os.ReadFile(path)
	w := masterKey(t)
	keys, err := credential.OpenKeys(dir, secretbox.Source{}, w)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(path)
	entry := strings.SplitN(strings.TrimSpace(string(before)), "=", 2)[1]
	if !masterkey.IsWrapped(after) || strings.Contains(string(after), entry) {
		t.Fatalf("the keyring file is not wrapped: %.40q", after)
	}
	v := &credential.Vault{Store: st, Keys: keys}
	if s, err := v.Open(ctx, meta.ID); err != nil || s.Reveal() != secret {
		t.Fatalf("open after wrapping: %v", err)
	}
	if _, _, err := v.Rotate(ctx, true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !masterkey.IsWrapped(b) {
		t.Fatal("rotation wrote the keyring in the clear")
	}
	if s, err := v.Open(ctx, meta.ID); err != nil || s.Reveal() != secret {
		t.Fatalf("open after rotation: %v", err)
	}
	if _, err := credential.OpenKeys(dir, secretbox.Source{}, nil); !errors.Is(err, masterkey.ErrNoMasterKey) {
		t.Fatalf("a wrapped keyring without a master key = %v, want ErrNoMasterKey", err)
	}
	if _, err := credential.OpenKeys(dir, secretbox.Source{}, masterKey(t)); !errors.Is(err, masterkey.ErrWrongMasterKey) {
		t.Fatalf("a wrapped keyring under another master key = %v, want ErrWrongMasterKey", err)
	}
}
