// Package masterkey wraps the deployment's data keys (the per-deployment keys in the store,
// the credential keyring file) under a master key the operator supplies, so that reading the
// database or the data directory alone yields no usable key. Wrapper is what a KMS
// implementation satisfies; Local is the master key held in a file or in the environment.
package masterkey

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/secretbox"
)

// Environment variables naming the master key: inline (a keyring value) or a file.
const (
	EnvKey     = "XEMA_MASTER_KEY"
	EnvKeyFile = "XEMA_MASTER_KEY_FILE"
)

// FileName is the master key file the gateway generates under its data directory when the
// operator supplies none (the development default).
const FileName = "master.key"

// prefix marks a wrapped value: "mk1:" and a secretbox sealed value naming the master key id.
const prefix = "mk1:"

var (
	// ErrNoMasterKey: no master key is configured and none may be generated here.
	ErrNoMasterKey = errors.New("no master key")
	// ErrWrongMasterKey: a wrapped value does not open under the configured master key.
	ErrWrongMasterKey = errors.New("wrong master key")
)

// Wrapper wraps data keys under a master key. aad binds a wrapped value to its purpose (the
// key's name): a wrapped key copied to another name does not unwrap.
type Wrapper interface {
	// ID names the master key Wrap uses (a KMS key id, or the local key's id).
	ID() string
	Wrap(ctx context.Context, plaintext, aad []byte) ([]byte, error)
	// Unwrap fails with ErrWrongMasterKey when wrapped is not the master key's.
	Unwrap(ctx context.Context, wrapped, aad []byte) ([]byte, error)
}

// IsWrapped tells a wrapped value from a raw key stored before wrapping existed (32 random
// bytes, which start with "mk1:" once in 2^32 and are never longer than 32 bytes).
func IsWrapped(b []byte) bool { return len(b) > 32 && strings.HasPrefix(string(b), prefix) }

// WrappedKeyID is the id of the master key that wrapped b ("" when b is not wrapped).
func WrappedKeyID(b []byte) string {
	if !IsWrapped(b) {
		return ""
	}
	parts := strings.Split(strings.TrimPrefix(string(b), prefix), ".")
	if len(parts) != 3 {
		return ""
	}
	return parts[1]
}

// Local is a master keyring held by the process: new values are wrapped under its first key,
// values wrapped under any of its keys unwrap (so the master key itself can be rotated by
// listing a new key first, then rewrapping).
type Local struct {
	kr *secretbox.Keyring
	// from names where the key was read (a file, or EnvKey), for the error of a value it
	// does not open; "" for a keyring given directly.
	from string
}

// NewLocal wraps with kr.
func NewLocal(kr *secretbox.Keyring) *Local { return &Local{kr: kr} }

// ID implements Wrapper.
func (l *Local) ID() string { return l.kr.KeyID() }

// Wrap implements Wrapper.
func (l *Local) Wrap(_ context.Context, plaintext, aad []byte) ([]byte, error) {
	sealed, err := l.kr.Seal(plaintext, purpose(aad))
	if err != nil {
		return nil, fmt.Errorf("wrap: %w", err)
	}
	return []byte(prefix + sealed), nil
}

// Unwrap implements Wrapper.
func (l *Local) Unwrap(_ context.Context, wrapped, aad []byte) ([]byte, error) {
	if !IsWrapped(wrapped) {
		return nil, fmt.Errorf("%w: the value is not wrapped", ErrWrongMasterKey)
	}
	pt, err := l.kr.Open(strings.TrimPrefix(string(wrapped), prefix), purpose(aad))
	if err != nil {
		return nil, fmt.Errorf("%w: wrapped under master key %q, which does not open it (configured: %q%s): %w; %s",
			ErrWrongMasterKey, WrappedKeyID(wrapped), l.ID(), l.fromClause(), err, l.remedy(WrappedKeyID(wrapped)))
	}
	return pt, nil
}

func (l *Local) fromClause() string {
	if l.from == "" {
		return ""
	}
	return " from " + l.from
}

// remedy says what to do about a value the key does not open: a key of the same id that does
// not open it is another key under an old name (a regenerated file), which no new key can
// replace.
func (l *Local) remedy(wrappedID string) string {
	where := "the master key"
	if l.from != "" {
		where = l.from
	}
	if l.kr.Has(wrappedID) {
		return fmt.Sprintf("%s holds a key named %q, but not the one that wrapped it (was it generated again?): put back the deployment's master key (its backup, your secret manager) and start again", where, wrappedID)
	}
	return fmt.Sprintf("give the master key %q (a %s=... line in %s, or the file that holds it): a new key cannot open what the old one wrapped", wrappedID, wrappedID, where)
}

func purpose(aad []byte) []byte { return append([]byte("xema-master-key:"), aad...) }

// Source is where the master key comes from: a keyring value ($XEMA_MASTER_KEY), a file
// (--master-key-file or $XEMA_MASTER_KEY_FILE), or, when neither is set, DataDir/master.key.
type Source struct {
	Inline, File string
	// DataDir holds the generated development master key when Inline and File are empty.
	DataDir string
}

// SourceFromEnv is the Source of flagFile (--master-key-file) or else the environment.
func SourceFromEnv(flagFile, dataDir string, getenv func(string) string) Source {
	s := Source{Inline: getenv(EnvKey), File: getenv(EnvKeyFile), DataDir: dataDir}
	if flagFile != "" {
		s.File = flagFile
	}
	return s
}

// Check refuses a Source naming both an inline key and a file.
func (s Source) Check() error {
	if s.Inline != "" && s.File != "" {
		return fmt.Errorf("master key: set only one of %s and --master-key-file (or %s)", EnvKey, EnvKeyFile)
	}
	return nil
}

// Default is the file generated under the data directory.
func (s Source) Default() string { return filepath.Join(s.DataDir, FileName) }

// Open loads the master key. With neither Inline nor File it reads DataDir/master.key; when
// generate is set and that file does not exist, it is created (0600, one fresh key) and a
// warning logged: the development default, which keeps the key beside the data it protects.
func (s Source) Open(generate bool) (Wrapper, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	switch {
	case s.Inline != "":
		kr, err := secretbox.Parse(s.Inline)
		if err != nil {
			return nil, fmt.Errorf("master key %s: %w", EnvKey, err)
		}
		return &Local{kr: kr, from: EnvKey}, nil
	case s.File != "":
		return openFile(s.File)
	case s.DataDir == "":
		return nil, fmt.Errorf("%w: give --master-key-file or %s", ErrNoMasterKey, EnvKey)
	}
	path := s.Default()
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if !generate {
			return nil, fmt.Errorf("%w: %s does not exist: give the deployment's master key with --master-key-file or %s",
				ErrNoMasterKey, path, EnvKey)
		}
		if err := createFile(path); err != nil {
			return nil, err
		}
	}
	w, err := openFile(path)
	if err != nil {
		return nil, err
	}
	slog.Warn("master key read from the data directory, beside the data it protects; in production keep it elsewhere (--master-key-file, "+
		EnvKey+" or a KMS)", "file", path)
	return w, nil
}

func openFile(path string) (Wrapper, error) {
	kr, err := secretbox.FromFile(path)
	if err != nil {
		return nil, fmt.Errorf("master key: %w", err)
	}
	return &Local{kr: kr, from: path}, nil
}

// createFile writes a new master key file unless one exists: written aside, then linked into
// place, so a replica starting at the same moment reads either no file or a whole one.
func createFile(path string) error {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return fmt.Errorf("master key: generate: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("master key: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".master.key-*")
	if err != nil {
		return fmt.Errorf("master key: %w", err)
	}
	defer os.Remove(tmp.Name())
	entry := fmt.Sprintf("# xema master key generated %s: it wraps the deployment's keys (losing it loses them)\nm%d=%s\n",
		time.Now().UTC().Format(time.RFC3339), time.Now().UnixNano(), base64.StdEncoding.EncodeToString(raw[:]))
	if _, err := tmp.WriteString(entry); err != nil {
		tmp.Close()
		return fmt.Errorf("master key: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("master key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("master key: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("master key: %w", err)
	}
	slog.Warn("generated a master key in the data directory (development default): back it up with the data; without it the deployment's keys are lost",
		"file", path)
	return nil
}
