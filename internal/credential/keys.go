package credential

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/atomicfile"
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

	mu sync.Mutex
	kr *secretbox.Keyring
	fi os.FileInfo // the file the keyring was read from
}

// OpenKeys loads the keyring of src (an inline keyring, or a file) or else dataDir/secret.key,
// creating that file (0600, one fresh AES-256 key) at first start.
func OpenKeys(dataDir string, src secretbox.Source) (*Keys, error) {
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
	path := src.File
	if path == "" {
		path = filepath.Join(dataDir, KeyFileName)
		if err := createKeyFile(path); err != nil {
			return nil, err
		}
	}
	k := &Keys{path: path}
	if _, err := k.Current(); err != nil {
		return nil, err
	}
	return k, nil
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
	kr, err := secretbox.FromFile(k.path)
	if err != nil {
		return nil, fmt.Errorf("credential keyring: %w", err)
	}
	k.kr, k.fi = kr, fi
	return kr, nil
}

// createKeyFile writes a keyring file with one new key unless the file exists.
func createKeyFile(path string) error {
	entry, err := newKeyEntry()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("credential keyring: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("credential keyring: %w", err)
	}
	if _, err := f.WriteString(entry + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("credential keyring: %w", err)
	}
	return f.Close()
}

// newKeyEntry is a keyring line "k<unix-seconds>=<base64 key>" for a fresh random key.
func newKeyEntry() (string, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("credential keyring: generate key: %w", err)
	}
	return fmt.Sprintf("k%d=%s", time.Now().UnixNano(), base64.StdEncoding.EncodeToString(raw[:])), nil
}

// prependKey writes path anew (atomically, 0600) with a fresh key first and the old entries
// after it, so values sealed under the old keys still open.
func prependKey(path string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("credential keyring: %w", err)
	}
	entry, err := newKeyEntry()
	if err != nil {
		return err
	}
	return writeKeyFile(path, entry+"\n"+string(old))
}

// keepNewest rewrites path with its first key only.
func keepNewest(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("credential keyring: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return writeKeyFile(path, line+"\n")
		}
	}
	return secretbox.ErrNoKey
}

func writeKeyFile(path, content string) error {
	if err := atomicfile.Write(path, []byte(content), 0o600); err != nil {
		return fmt.Errorf("credential keyring: %w", err)
	}
	return nil
}
