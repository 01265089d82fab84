package masterkey

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func keyEntry(t *testing.T, kid string) string {
	t.Helper()
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		t.Fatal(err)
	}
	return kid + "=" + base64.StdEncoding.EncodeToString(raw[:])
}

// TestLocalWrap: a value wraps and unwraps under its purpose only; another master key, a
// tampered value or a raw key is ErrWrongMasterKey; a keyring listing a new key first still
// unwraps values of the old one.
func TestLocalWrap(t *testing.T) {
	ctx := context.Background()
	old := keyEntry(t, "m1")
	w, err := Source{Inline: old}.Open(false)
	if err != nil {
		t.Fatal(err)
	}
	wrapped, err := w.Wrap(ctx, []byte("data key"), []byte("audit-chain"))
	if err != nil {
		t.Fatal(err)
	}
	if !IsWrapped(wrapped) || WrappedKeyID(wrapped) != "m1" || strings.Contains(string(wrapped), "data key") {
		t.Fatalf("wrapped = %q", wrapped)
	}
	if pt, err := w.Unwrap(ctx, wrapped, []byte("audit-chain")); err != nil || string(pt) != "data key" {
		t.Fatalf("Unwrap = %q, %v", pt, err)
	}
	other, _ := Source{Inline: keyEntry(t, "m2")}.Open(false)
	tampered := append([]byte(nil), wrapped...)
	tampered[len(tampered)-2] ^= 1
	for name, try := range map[string]func() ([]byte, error){
		"other purpose":    func() ([]byte, error) { return w.Unwrap(ctx, wrapped, []byte("search-cursor")) },
		"other master key": func() ([]byte, error) { return other.Unwrap(ctx, wrapped, []byte("audit-chain")) },
		"tampered":         func() ([]byte, error) { return w.Unwrap(ctx, tampered, []byte("audit-chain")) },
		"raw":              func() ([]byte, error) { return w.Unwrap(ctx, make([]byte, 32), []byte("audit-chain")) },
	} {
		if _, err := try(); !errors.Is(err, ErrWrongMasterKey) {
			t.Errorf("%s: %v, want ErrWrongMasterKey", name, err)
		}
	}
	rotated, err := Source{Inline: keyEntry(t, "m3") + "\n" + old}.Open(false)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.ID() != "m3" {
		t.Fatalf("rotated ID = %s", rotated.ID())
	}
	if pt, err := rotated.Unwrap(ctx, wrapped, []byte("audit-chain")); err != nil || string(pt) != "data key" {
		t.Fatalf("a rotated keyring unwraps the old key's values: %q, %v", pt, err)
	}
	if IsWrapped(make([]byte, 32)) {
		t.Fatal("a raw 32-byte key reads as wrapped")
	}
}

// TestSourceOpen: the development default is generated only when asked (0600), then read
// back; an explicit file must exist and be private; inline and file together are refused.
func TestSourceOpen(t *testing.T) {
	dir := t.TempDir()
	s := Source{DataDir: dir}
	if _, err := s.Open(false); !errors.Is(err, ErrNoMasterKey) {
		t.Fatalf("Open(false) with no file = %v, want ErrNoMasterKey", err)
	}
	if _, err := os.Stat(s.Default()); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("Open(false) generated a master key")
	}
	// Replicas starting together all read the one file written first.
	ids := make([]string, 4)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := s.Open(true)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = w.ID()
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] || id == "" {
			t.Fatalf("concurrent first starts disagree: %v", ids)
		}
	}
	fi, err := os.Stat(s.Default())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("generated file: %v, %v", fi, err)
	}
	if w, err := (Source{File: s.Default()}).Open(false); err != nil || w.ID() != ids[0] {
		t.Fatalf("the file named explicitly: %v", err)
	}
	if _, err := (Source{File: filepath.Join(dir, "missing")}).Open(true); err == nil {
		t.Fatal("a missing --master-key-file was generated or accepted")
	}
	if err := os.Chmod(s.Default(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (Source{File: s.Default()}).Open(false); err == nil || !strings.Contains(err.Error(), "0600") {
		t.Fatalf("a world-readable master key file = %v", err)
	}
	if _, err := (Source{Inline: "x", File: "y"}).Open(false); err == nil {
		t.Fatal("inline and file together were accepted")
	}
	if _, err := (Source{Inline: "not base64!"}).Open(false); err == nil {
		t.Fatal("a malformed inline key was accepted")
	}
	got := SourceFromEnv("flag-file", dir, func(k string) string { return map[string]string{EnvKeyFile: "env-file"}[k] })
	if got.File != "flag-file" || got.DataDir != dir {
		t.Fatalf("the flag wins over the environment: %+v", got)
	}
}

// TestKeyFileModes: a master key file group or others may read is refused by name, whether
// named or in the data directory, at 0640 and 0604 as at 0644; 0600 opens.
func TestKeyFileModes(t *testing.T) {
	dir := t.TempDir()
	s := Source{DataDir: dir}
	if _, err := s.Open(true); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644, 0o600} {
		if err := os.Chmod(s.Default(), mode); err != nil {
			t.Fatal(err)
		}
		for name, src := range map[string]Source{"named": {File: s.Default()}, "in the data directory": s} {
			_, err := src.Open(false)
			if mode == 0o600 {
				if err != nil {
					t.Errorf("%s at 0600: %v", name, err)
				}
				continue
			}
			if err == nil || !strings.Contains(err.Error(), s.Default()) || !strings.Contains(err.Error(), "want 0600") {
				t.Errorf("%s at %04o: %v; want refused naming the file", name, mode, err)
			}
		}
	}
}

// TestWrongMasterKeySaysWhatToDo: a value the master key does not open is reported with the
// file the key came from and the way out: a file regenerated under the same id is named as
// such (put the deployment's key back), a key of another id asks for the one that wrapped it.
func TestWrongMasterKeySaysWhatToDo(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "master.key")
	write := func(entry string) Wrapper {
		t.Helper()
		if err := os.WriteFile(file, []byte(entry+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		w, err := Source{File: file}.Open(false)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	wrapped, err := write(keyEntry(t, "m1")).Wrap(ctx, []byte("data key"), []byte("audit-chain"))
	if err != nil {
		t.Fatal(err)
	}
	for entry, want := range map[string]string{
		keyEntry(t, "m1"): `wrapped under master key "m1", which does not open it (configured: "m1" from ` + file + `)`,
		keyEntry(t, "m2"): `wrapped under master key "m1", which does not open it (configured: "m2" from ` + file + `)`,
	} {
		_, err := write(entry).Unwrap(ctx, wrapped, []byte("audit-chain"))
		if !errors.Is(err, ErrWrongMasterKey) || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want it to say %s", err, want)
		}
		remedy := `give the master key "m1" (a m1=... line in ` + file
		if strings.HasPrefix(entry, "m1=") {
			remedy = file + ` holds a key named "m1", but not the one that wrapped it (was it generated again?): put back the deployment's master key`
		}
		if !strings.Contains(err.Error(), remedy) {
			t.Fatalf("err = %v, want it to say %s", err, remedy)
		}
	}
}
