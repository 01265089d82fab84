// Package secretbox seals small secrets at rest (AES-256-GCM) under a keyring whose keys carry
// ids, so a key can be rotated: new values are sealed with the newest key and values sealed
// under any listed key still open.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

// EnvKey holds the keyring inline; EnvKeyFile names a file holding it.
const (
	EnvKey     = "XEMA_SECRET_KEY"
	EnvKeyFile = "XEMA_SECRET_KEY_FILE"
)

// prefix versions the sealed format: "sb1.<kid>.<base64url(nonce|ciphertext)>".
const prefix = "sb1"

var (
	// ErrNoKey means no keyring is configured.
	ErrNoKey = errors.New("secretbox: no key configured (set " + EnvKey + " or " + EnvKeyFile + ")")
	// ErrBadKey means a configured key is malformed.
	ErrBadKey = errors.New("secretbox: bad key")
	// ErrOpen means a sealed value could not be opened: malformed, unknown key id, or tampered.
	ErrOpen = errors.New("secretbox: cannot open sealed value")
)

// kidPattern is at most 40 characters, so a bare 44-character base64 key ending in "=" is
// never mistaken for "KID=".
var kidPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)

type key struct {
	id   string
	aead cipher.AEAD
}

// Keyring seals with its first (newest) key and opens with any of its keys.
type Keyring struct {
	keys []key
}

// Parse reads a keyring spec: entries separated by commas or newlines, newest first, each
// either "KID=BASE64KEY" or a bare "BASE64KEY" (its id is then derived from the key). Every
// key is 32 bytes (AES-256) in standard base64. Blank lines and lines starting with # are ignored.
func Parse(spec string) (*Keyring, error) {
	var kr Keyring
	seen := map[string]bool{}
	for i, entry := range strings.FieldsFunc(spec, func(r rune) bool { return r == ',' || r == '\n' }) {
		entry = strings.TrimSpace(entry)
		if entry == "" || strings.HasPrefix(entry, "#") {
			continue
		}
		id, b64, named := strings.Cut(entry, "=")
		if !named || !kidPattern.MatchString(id) {
			id, b64 = "", entry
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("%w: entry %d is not standard base64", ErrBadKey, i+1)
		}
		if len(raw) != 32 {
			return nil, fmt.Errorf("%w: entry %d is %d bytes, want 32", ErrBadKey, i+1, len(raw))
		}
		if id == "" {
			sum := sha256.Sum256(raw)
			id = hex.EncodeToString(sum[:4])
		}
		if seen[id] {
			return nil, fmt.Errorf("%w: key id %q listed twice", ErrBadKey, id)
		}
		seen[id] = true
		block, err := aes.NewCipher(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: entry %d: %v", ErrBadKey, i+1, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("%w: entry %d: %v", ErrBadKey, i+1, err)
		}
		kr.keys = append(kr.keys, key{id: id, aead: aead})
	}
	if len(kr.keys) == 0 {
		return nil, ErrNoKey
	}
	return &kr, nil
}

// Source is where a keyring comes from: a keyring value (XEMA_SECRET_KEY) or a file
// (XEMA_SECRET_KEY_FILE). The command reads both once, at start (SourceFromEnv); packages take
// the Source and never read the environment themselves.
type Source struct {
	Inline, File string
}

// SourceFromEnv is the Source the process's environment names (getenv is os.Getenv).
func SourceFromEnv(getenv func(string) string) Source {
	return Source{Inline: getenv(EnvKey), File: getenv(EnvKeyFile)}
}

// Check refuses a Source naming both: which one wins would be a guess.
func (s Source) Check() error {
	if s.Inline != "" && s.File != "" {
		return fmt.Errorf("%w: set only one of %s and %s", ErrBadKey, EnvKey, EnvKeyFile)
	}
	return nil
}

// Keyring loads the keyring of s: the inline value, or else the file. Neither is ErrNoKey.
func (s Source) Keyring() (*Keyring, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	switch {
	case s.Inline != "":
		kr, err := Parse(s.Inline)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvKey, err)
		}
		return kr, nil
	case s.File != "":
		return FromFile(s.File)
	}
	return nil, ErrNoKey
}

// FromFile loads a keyring file (same format as Parse, one entry a line). The file must not be
// readable by group or others.
func FromFile(path string) (*Keyring, error) {
	b, err := ReadPrivate(path)
	if err != nil {
		return nil, err
	}
	kr, err := Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return kr, nil
}

// ReadPrivate reads a file holding a secret (a key, a keyring, a webhook secret), refusing
// with ErrBadKey one that group or others may read or write: a secret others can read is no
// secret, and one they can write is not the operator's. The mode checked is that of the
// file read (its open descriptor's), not of whatever the path names a moment later.
func ReadPrivate(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%w: key file %s has mode %04o, want 0600 or stricter (chmod 600 %s)", ErrBadKey, path, perm, path)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return b, nil
}

// KeyID is the id of the key Seal uses.
func (kr *Keyring) KeyID() string { return kr.keys[0].id }

// Has reports whether the keyring holds a key of id kid.
func (kr *Keyring) Has(kid string) bool {
	return slices.ContainsFunc(kr.keys, func(k key) bool { return k.id == kid })
}

// Seal encrypts plaintext with the newest key. aad binds the sealed value to its purpose
// (e.g. "identity/registration:client_secret"): opening it under another aad fails.
func (kr *Keyring) Seal(plaintext, aad []byte) (string, error) {
	k := kr.keys[0]
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(plaintext)+k.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("secretbox: nonce: %w", err)
	}
	out := k.aead.Seal(nonce, nonce, plaintext, kidAAD(k.id, aad))
	return prefix + "." + k.id + "." + base64.RawURLEncoding.EncodeToString(out), nil
}

// Open decrypts a value sealed under any key of the keyring.
func (kr *Keyring) Open(sealed string, aad []byte) ([]byte, error) {
	parts := strings.Split(sealed, ".")
	if len(parts) != 3 || parts[0] != prefix {
		return nil, fmt.Errorf("%w: not a %s sealed value", ErrOpen, prefix)
	}
	var k *key
	for i := range kr.keys {
		if kr.keys[i].id == parts[1] {
			k = &kr.keys[i]
			break
		}
	}
	if k == nil {
		return nil, fmt.Errorf("%w: sealed with key id %q, which is not in the keyring", ErrOpen, parts[1])
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(raw) < k.aead.NonceSize()+k.aead.Overhead() {
		return nil, fmt.Errorf("%w: malformed ciphertext", ErrOpen)
	}
	n := k.aead.NonceSize()
	pt, err := k.aead.Open(nil, raw[:n], raw[n:], kidAAD(k.id, aad))
	if err != nil {
		return nil, fmt.Errorf("%w: authentication failed (wrong key, purpose or tampered)", ErrOpen)
	}
	return pt, nil
}

// kidAAD binds the key id into the authenticated data so a sealed value's kid cannot be
// swapped.
func kidAAD(kid string, aad []byte) []byte {
	return append([]byte(kid+"\x00"), aad...)
}
