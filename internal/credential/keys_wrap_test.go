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
	if _, err := v.Rotate(ctx, true); err != nil {
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

// TestKeyFileModes: a credential keyring file group or others may read is refused by name,
// at 0640 and 0604 as at 0644: the data directory's, plain or wrapped, and one named by the
// operator; 0600 opens.
func TestKeyFileModes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		w     masterkey.Wrapper
		named bool
	}{{"plain", nil, false}, {"wrapped", masterKey(t), false}, {"named", nil, true}} {
		dir := t.TempDir()
		if _, err := credential.OpenKeys(dir, secretbox.Source{}, tc.w); err != nil {
			t.Fatal(err)
		}
		path, src := filepath.Join(dir, credential.KeyFileName), secretbox.Source{}
		if tc.named {
			src.File = path
		}
		for _, mode := range []os.FileMode{0o640, 0o604, 0o644, 0o600} {
			if err := os.Chmod(path, mode); err != nil {
				t.Fatal(err)
			}
			_, err := credential.OpenKeys(dir, src, tc.w)
			switch {
			case mode == 0o600 && err != nil:
				t.Errorf("%s at 0600: %v", tc.name, err)
			case mode != 0o600 && (!errors.Is(err, secretbox.ErrBadKey) || !strings.Contains(err.Error(), path)):
				t.Errorf("%s at %04o: %v; want refused naming the file", tc.name, mode, err)
			}
		}
	}
}
