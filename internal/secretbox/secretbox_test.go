package secretbox

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func newKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func TestSealOpenRotation(t *testing.T) {
	oldKey, newK := newKey(t), newKey(t)
	oldRing, err := Parse("k1=" + oldKey)
	if err != nil {
		t.Fatal(err)
	}
	aad := []byte("purpose")
	sealedOld, err := oldRing.Seal([]byte("s3cret"), aad)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealedOld, "s3cret") || !strings.HasPrefix(sealedOld, "sb1.k1.") {
		t.Fatalf("sealed value %q", sealedOld)
	}
	rotated, err := Parse("k2=" + newK + ",k1=" + oldKey)
	if err != nil {
		t.Fatal(err)
	}
	got, err := rotated.Open(sealedOld, aad)
	if err != nil || string(got) != "s3cret" {
		t.Fatalf("open old under rotated ring: %q %v", got, err)
	}
	sealedNew, err := rotated.Seal([]byte("s3cret"), aad)
	if err != nil || !strings.HasPrefix(sealedNew, "sb1.k2.") {
		t.Fatalf("rotated ring must seal with newest key: %q %v", sealedNew, err)
	}
	if _, err := oldRing.Open(sealedNew, aad); !errors.Is(err, ErrOpen) || !strings.Contains(err.Error(), `"k2"`) {
		t.Fatalf("old ring opened a value sealed under k2: %v", err)
	}
}

func TestOpenRejects(t *testing.T) {
	kr, err := Parse(newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := kr.Seal([]byte("value"), []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(sealed, ".")
	raw, _ := base64.RawURLEncoding.DecodeString(parts[2])
	raw[len(raw)-1] ^= 1
	tampered := parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(raw)
	for name, tc := range map[string]struct{ sealed, aad string }{
		"wrong aad":     {sealed, "b"},
		"tampered":      {tampered, "a"},
		"kid swapped":   {parts[0] + ".other." + parts[2], "a"},
		"not sealed":    {"value", "a"},
		"bad base64":    {parts[0] + "." + parts[1] + ".!!", "a"},
		"short":         {parts[0] + "." + parts[1] + ".AAAA", "a"},
		"wrong version": {"sb0." + parts[1] + "." + parts[2], "a"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := kr.Open(tc.sealed, []byte(tc.aad)); !errors.Is(err, ErrOpen) {
				t.Fatalf("want ErrOpen, got %v", err)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	k := newKey(t)
	for name, spec := range map[string]string{
		"empty":      "",
		"only space": " \n# comment\n",
		"short key":  base64.StdEncoding.EncodeToString([]byte("short")),
		"not base64": "k1=@@@",
		"dup id":     "a=" + k + ",a=" + newKey(t),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(spec)
			if !errors.Is(err, ErrBadKey) && !errors.Is(err, ErrNoKey) {
				t.Fatalf("want ErrBadKey or ErrNoKey, got %v", err)
			}
			if strings.Contains(fmtErr(err), k) {
				t.Fatal("error leaks key material")
			}
		})
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestSourceInlineAndFile(t *testing.T) {
	k := newKey(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "keys")
	if err := os.WriteFile(file, []byte("# newest first\nk9="+k+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := Source{File: file}
	if _, err := src.Keyring(); !errors.Is(err, ErrBadKey) {
		t.Fatalf("world-readable key file accepted: %v", err)
	}
	if err := os.Chmod(file, 0o600); err != nil {
		t.Fatal(err)
	}
	kr, err := src.Keyring()
	if err != nil || kr.KeyID() != "k9" {
		t.Fatalf("from file: %v", err)
	}
	src.Inline = k
	if _, err := src.Keyring(); !errors.Is(err, ErrBadKey) {
		t.Fatalf("both env vars set accepted: %v", err)
	}
	src.File = ""
	kr2, err := src.Keyring()
	if err != nil {
		t.Fatal(err)
	}
	// The bare key's derived id is stable, so a value sealed by one process opens in the next.
	sealed, _ := kr2.Seal([]byte("x"), nil)
	kr3, _ := Parse(k)
	if got, err := kr3.Open(sealed, nil); err != nil || !bytes.Equal(got, []byte("x")) {
		t.Fatalf("derived kid not stable: %v", err)
	}
	if _, err := (Source{}).Keyring(); !errors.Is(err, ErrNoKey) {
		t.Fatalf("want ErrNoKey, got %v", err)
	}
}

// TestSealNeverReusesANonce: the same plaintext sealed twice under the same key and purpose
// differs, nonce included (a fixed or zero nonce would repeat it, and AES-GCM with a repeated
// nonce leaks the plaintexts' XOR and the authentication key); both still open.
func TestSealNeverReusesANonce(t *testing.T) {
	kr, err := Parse(newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	pt, aad := []byte("the same secret"), []byte("test:purpose")
	seen := map[string]bool{}
	nonces := map[string]bool{}
	for range 64 {
		sealed, err := kr.Seal(pt, aad)
		if err != nil {
			t.Fatal(err)
		}
		if seen[sealed] {
			t.Fatalf("sealed the same plaintext to the same value twice: %s", sealed)
		}
		seen[sealed] = true
		raw, err := base64.RawURLEncoding.DecodeString(strings.Split(sealed, ".")[2])
		if err != nil {
			t.Fatal(err)
		}
		nonce := raw[:kr.keys[0].aead.NonceSize()]
		if bytes.Equal(nonce, make([]byte, len(nonce))) || nonces[string(nonce)] {
			t.Fatalf("nonce %x is zero or repeated", nonce)
		}
		nonces[string(nonce)] = true
		if got, err := kr.Open(sealed, aad); err != nil || !bytes.Equal(got, pt) {
			t.Fatalf("Open = %q, %v", got, err)
		}
	}
}

// TestReadPrivate: a secret file any group or other may read or write is refused, naming its
// mode, whichever bit it is (0640 and 0604 as well as 0644), and is left as it was; 0600 and
// 0400 are read.
func TestReadPrivate(t *testing.T) {
	const content = "k1=c2VjcmV0\n"
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{
		{0o600, true}, {0o400, true},
		{0o640, false}, {0o604, false}, {0o644, false}, {0o660, false}, {0o606, false}, {0o620, false}, {0o602, false},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			got, err := ReadPrivate(path)
			switch {
			case tc.ok && (err != nil || string(got) != content):
				t.Fatalf("read %q, %v; want the content", got, err)
			case !tc.ok && (!errors.Is(err, ErrBadKey) || got != nil ||
				!strings.Contains(err.Error(), "0"+strconv.FormatUint(uint64(tc.mode), 8)) || !strings.Contains(err.Error(), "want 0600")):
				t.Fatalf("mode %04o: %q, %v; want refused naming the mode", tc.mode, got, err)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != tc.mode {
				t.Fatalf("the file's mode became %v (%v)", fi.Mode(), err)
			}
		})
	}
	if _, err := ReadPrivate(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
}
