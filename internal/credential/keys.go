package credential

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/atomicfile"
	"github.com/xemahq/xema/internal/masterkey"
	"github.com/xemahq/xema/internal/secretbox"
)

// KeyFileName is the keyring file under the data directory, used when neither
// XEMA_SECRET_KEY nor XEMA_SECRET_KEY_FILE is set.
const KeyFileName = "secret.key"

// Keys is where the credential keyring comes from: the environment (secretbox.FromEnv) or a
// keyring file. A file keyring is re-read when the file changes, so a running server picks up
// a key rotated by `xema credential rotate-key` without a restart.
type Keys struct {
	path string // "" when the keyring comes from the environment
	// master wraps the keyring file under the data directory (nil: the file is plain). A
	// file the operator names (XEMA_SECRET_KEY_FILE) is theirs and stays as they wrote it.
	master masterkey.Wrapper

	mu sync.Mutex
	kr *secretbox.Keyring
	fi os.FileInfo // the file the keyring was read from
}

// OpenKeys loads the keyring of src (an inline keyring, or a file) or else dataDir/secret.key,
// creating that file (0600, one fresh AES-256 key) at first start. With master, that file is
// kept wrapped by the master key: a plain one (written by an older version) is wrapped in place.
func OpenKeys(dataDir string, src secretbox.Source, master masterkey.Wrapper) (*Keys, error) {
	if err := src.Check(); err != nil {
		return nil, err
	}
	if src.Inline != "" {
		kr, err := src.Keyring()
		if err != nil {
			return nil, err
		}
		return &Keys{kr: kr}, nil
	}
	k := &Keys{path: src.File}
	if k.path == "" {
		k.path, k.master = filepath.Join(dataDir, KeyFileName), master
		if err := k.create(); err != nil {
			return nil, err
		}
		if err := k.wrapInPlace(); err != nil {
			return nil, err
		}
	}
	if _, err := k.Current(); err != nil {
		return nil, err
	}
	return k, nil
}

// wrappedAAD binds the wrapped keyring file to its purpose.
var wrappedAAD = []byte("credential-keyring")

// wrapInPlace rewrites a plain keyring file wrapped, when the Keys wrap.
func (k *Keys) wrapInPlace() error {
	if k.master == nil {
		return nil
	}
	b, err := k.readFile()
	if err != nil || masterkey.IsWrapped(b) {
		return err
	}
	return k.write(string(b))
}

// readFile reads the keyring file as stored, refusing one readable by group or others.
func (k *Keys) readFile() ([]byte, error) {
	b, err := secretbox.ReadPrivate(k.path)
	if err != nil {
		return nil, fmt.Errorf("credential keyring: %w", err)
	}
	return b, nil
}

// plain is the keyring file's content, unwrapped.
func (k *Keys) plain() (string, error) {
	b, err := k.readFile()
	if err != nil {
		return "", err
	}
	if !masterkey.IsWrapped(b) {
		return string(b), nil
	}
	if k.master == nil {
		return "", fmt.Errorf("credential keyring %s: %w: the file is wrapped by a master key and none is configured", k.path, masterkey.ErrNoMasterKey)
	}
	pt, err := k.master.Unwrap(context.Background(), b, wrappedAAD)
	if err != nil {
		return "", fmt.Errorf("credential keyring %s: %w", k.path, err)
	}
	return string(pt), nil
}

// write replaces the keyring file with content, wrapped when the Keys wrap.
func (k *Keys) write(content string) error {
	b := []byte(content)
	if k.master != nil {
		var err error
		if b, err = k.master.Wrap(context.Background(), b, wrappedAAD); err != nil {
			return fmt.Errorf("credential keyring: %w", err)
		}
	}
	if err := atomicfile.Write(k.path, b, 0o600); err != nil {
		return fmt.Errorf("credential keyring: %w", err)
	}
	return nil
}

// Path is the keyring file, or "" when the keyring comes from XEMA_SECRET_KEY.
func (k *Keys) Path() string { return k.path }

// Current returns the keyring, re-reading a keyring file that changed since the last read.
func (k *Keys) Current() (*secretbox.Keyring, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.path == "" {
		return k.kr, nil
	}
	fi, err := os.Stat(k.path)
	if err != nil {
		return nil, fmt.Errorf("credential keyring: %w", err)
	}
	// The file is only ever replaced by rename, so a new inode means new content even when
	// the clock's granularity gives both versions the same mtime.
	if k.kr != nil && k.fi != nil && os.SameFile(fi, k.fi) && fi.ModTime().Equal(k.fi.ModTime()) && fi.Size() == k.fi.Size() {
		return k.kr, nil
	}
	content, err := k.plain()
	if err != nil {
		return nil, err
	}
	kr, err := secretbox.Parse(content)
	if err != nil {
		return nil, fmt.Errorf("credential keyring %s: %w", k.path, err)
	}
	k.kr, k.fi = kr, fi
	return kr, nil
}

// create writes a keyring file with one new key unless the file exists: written aside, then
// linked into place, so a replica starting at the same moment reads no file or a whole one.
func (k *Keys) create() error {
	if _, err := os.Stat(k.path); err == nil {
		return nil
	}
	entry, err := newKeyEntry()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(k.path), 0o700); err != nil {
		return fmt.Errorf("credential keyring: %w", err)
	}
	tmp := &Keys{path: k.path + ".new-" + strconv.FormatInt(time.Now().UnixNano(), 36), master: k.master}
	defer os.Remove(tmp.path)
	if err := tmp.write(entry + "\n"); err != nil {
		return err
	}
	if err := os.Link(tmp.path, k.path); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("credential keyring: %w", err)
	}
	return nil
}

// newKeyEntry is a keyring line "k<unix-seconds>=<base64 key>" for a fresh random key.
func newKeyEntry() (string, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("credential keyring: generate key: %w", err)
	}
	return fmt.Sprintf("k%d=%s", time.Now().UnixNano(), base64.StdEncoding.EncodeToString(raw[:])), nil
}

// prependKey writes the file anew (atomically, 0600) with a fresh key first and the old
// entries after it, so values sealed under the old keys still open.
func (k *Keys) prependKey() error {
	old, err := k.plain()
	if err != nil {
		return err
	}
	entry, err := newKeyEntry()
	if err != nil {
		return err
	}
	return k.write(entry + "\n" + old)
}

// keepNewest rewrites the file with its first key only.
func (k *Keys) keepNewest() error {
	b, err := k.plain()
	if err != nil {
		return err
	}
	for _, line := range strings.Split(b, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return k.write(line + "\n")
		}
	}
	return secretbox.ErrNoKey
}
