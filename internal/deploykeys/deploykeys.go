// Package deploykeys holds the per-deployment keys at rest: the search cursor key, the audit
// input-hash key and the audit chain key live in the store wrapped by the master key
// (masterkey.Wrapper), so reading the database alone forges no cursor and no chain head.
// It generates them at the deployment's first start, wraps keys stored raw by an older
// version, and rotates each one.
package deploykeys

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/masterkey"
	"github.com/xemahq/xema/internal/store"
)

// Names are the per-deployment keys, in the order they are loaded.
var Names = []string{audit.KeyCursor, audit.KeyInputHash, audit.KeyChain}

// Consequences says, for each key, what rotating it does: `xema keys rotate` prints it.
var Consequences = map[string]string{
	audit.KeyCursor: "audit search cursors issued before the rotation stop working (a client starts its search again); " +
		"takes effect at each replica's next start",
	audit.KeyInputHash: "input hashes of records written after the rotation differ from those of equal inputs before it, " +
		"so equal inputs no longer match across the rotation; takes effect at each replica's next start",
	audit.KeyChain: "chains started after the rotation (each replica's next start) are keyed with the new key; the old key is " +
		"kept, so chains written before it still verify",
}

// retiredSep separates a retired chain key's name from the time it was retired at.
const retiredSep = "@"

// Keys are the per-deployment keys, unwrapped.
type Keys struct {
	Cursor, InputHash []byte
	// Chain keys the chains this process writes; Chains are it and every retired chain key,
	// newest first, so chains written before a rotation still verify.
	Chain  []byte
	Chains [][]byte
}

// Store keeps the per-deployment secrets (store.Store).
type Store interface {
	DeploymentKey(ctx context.Context, name string, candidate []byte) ([]byte, error)
	ListDeploymentKeys(ctx context.Context) ([]store.DeploymentKeyEntry, error)
	ReplaceDeploymentKey(ctx context.Context, name string, old, next []byte, keep ...store.DeploymentKeyEntry) error
}

// Load unwraps every per-deployment key of st with w: a key still stored raw (by a version
// before wrapping) is wrapped in place first, a missing one is generated (the deployment's
// first start; replicas starting together agree on the first one stored). A key wrapped under
// another master key fails with masterkey.ErrWrongMasterKey, naming both keys.
func Load(ctx context.Context, st Store, w masterkey.Wrapper) (Keys, error) {
	if err := wrapRaw(ctx, st, w); err != nil {
		return Keys{}, err
	}
	var k Keys
	for _, d := range []struct {
		name string
		dst  *[]byte
	}{{audit.KeyCursor, &k.Cursor}, {audit.KeyInputHash, &k.InputHash}, {audit.KeyChain, &k.Chain}} {
		key, err := load(ctx, st, w, d.name)
		if err != nil {
			return Keys{}, err
		}
		*d.dst = key
	}
	chains, err := ChainKeys(ctx, st, w)
	if err != nil {
		return Keys{}, err
	}
	k.Chains = chains
	return k, nil
}

// load returns the unwrapped key name, generating (32 random bytes) and storing it wrapped
// if none is stored.
func load(ctx context.Context, st Store, w masterkey.Wrapper, name string) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("deployment key %s: %w", name, err)
	}
	candidate, err := w.Wrap(ctx, fresh, []byte(name))
	if err != nil {
		return nil, fmt.Errorf("deployment key %s: %w", name, err)
	}
	stored, err := st.DeploymentKey(ctx, name, candidate)
	if err != nil {
		return nil, fmt.Errorf("deployment key %s: %w", name, err)
	}
	return unwrap(ctx, w, name, stored)
}

func unwrap(ctx context.Context, w masterkey.Wrapper, name string, wrapped []byte) ([]byte, error) {
	key, err := w.Unwrap(ctx, wrapped, []byte(name))
	if err != nil {
		return nil, fmt.Errorf("deployment key %s: %w: give the master key this deployment was started with (--master-key-file or %s)",
			name, err, masterkey.EnvKey)
	}
	return key, nil
}

// ChainKeys returns the audit chain keys of st, the current one first, then the retired
// ones newest first. It never generates one: a store without a chain key has none.
func ChainKeys(ctx context.Context, st Store, w masterkey.Wrapper) ([][]byte, error) {
	entries, err := st.ListDeploymentKeys(ctx)
	if err != nil {
		return nil, err
	}
	var current []byte
	type retired struct {
		at  int64
		key []byte
	}
	var old []retired
	for _, e := range entries {
		switch {
		case e.Name == audit.KeyChain:
			if current, err = unwrapStored(ctx, w, e); err != nil {
				return nil, err
			}
		case strings.HasPrefix(e.Name, audit.KeyChain+retiredSep):
			at, _ := strconv.ParseInt(strings.TrimPrefix(e.Name, audit.KeyChain+retiredSep), 10, 64)
			key, err := unwrapStored(ctx, w, e)
			if err != nil {
				return nil, err
			}
			old = append(old, retired{at, key})
		}
	}
	slices.SortFunc(old, func(a, b retired) int { return int(b.at - a.at) })
	var keys [][]byte
	if current != nil {
		keys = append(keys, current)
	}
	for _, r := range old {
		keys = append(keys, r.key)
	}
	return keys, nil
}

// unwrapStored unwraps a listed entry; a raw one (not yet wrapped) is returned as it is.
func unwrapStored(ctx context.Context, w masterkey.Wrapper, e store.DeploymentKeyEntry) ([]byte, error) {
	if !masterkey.IsWrapped(e.Secret) {
		return e.Secret, nil
	}
	return unwrap(ctx, w, e.Name, e.Secret)
}

// wrapRaw wraps, in place, every key stored raw by a version before wrapping existed.
func wrapRaw(ctx context.Context, st Store, w masterkey.Wrapper) error {
	entries, err := st.ListDeploymentKeys(ctx)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if masterkey.IsWrapped(e.Secret) {
			continue
		}
		wrapped, err := w.Wrap(ctx, e.Secret, []byte(e.Name))
		if err != nil {
			return fmt.Errorf("deployment key %s: %w", e.Name, err)
		}
		// A replica wrapping it at the same moment wins the compare-and-swap: its wrapping is as good.
		if err := st.ReplaceDeploymentKey(ctx, e.Name, e.Secret, wrapped); err != nil && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("deployment key %s: wrap: %w", e.Name, err)
		}
	}
	return nil
}

// Rotate replaces the key name with a fresh one, wrapped by w. A chain key is retired under
// a name of its own (audit-chain@<unix nanoseconds>), never dropped. Consequences[name] says
// what follows.
func Rotate(ctx context.Context, st Store, w masterkey.Wrapper, name string) error {
	if _, ok := Consequences[name]; !ok {
		return fmt.Errorf("%w: no per-deployment key %q: want one of %s", store.ErrInvalid, name, strings.Join(Names, ", "))
	}
	if err := wrapRaw(ctx, st, w); err != nil {
		return err
	}
	entries, err := st.ListDeploymentKeys(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(entries, func(e store.DeploymentKeyEntry) bool { return e.Name == name })
	if i < 0 {
		return fmt.Errorf("deployment key %s: %w: the deployment has not started yet", name, store.ErrNotFound)
	}
	old := entries[i]
	current, err := unwrap(ctx, w, name, old.Secret)
	if err != nil {
		return err
	}
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return fmt.Errorf("deployment key %s: %w", name, err)
	}
	next, err := w.Wrap(ctx, fresh, []byte(name))
	if err != nil {
		return fmt.Errorf("deployment key %s: %w", name, err)
	}
	var keep []store.DeploymentKeyEntry
	if name == audit.KeyChain {
		retiredName := name + retiredSep + strconv.FormatInt(time.Now().UnixNano(), 10)
		rewrapped, err := w.Wrap(ctx, current, []byte(retiredName))
		if err != nil {
			return fmt.Errorf("deployment key %s: %w", name, err)
		}
		keep = append(keep, store.DeploymentKeyEntry{Name: retiredName, Secret: rewrapped, CreatedAt: old.CreatedAt})
	}
	if err := st.ReplaceDeploymentKey(ctx, name, old.Secret, next, keep...); err != nil {
		return fmt.Errorf("rotate deployment key %s: %w", name, err)
	}
	return nil
}

// Rewrap wraps every stored key under w's current master key (after a new master key was
// listed first in the master keyring, or a KMS key rotated) and returns how many changed.
func Rewrap(ctx context.Context, st Store, w masterkey.Wrapper) (int, error) {
	entries, err := st.ListDeploymentKeys(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if masterkey.WrappedKeyID(e.Secret) == w.ID() {
			continue
		}
		key, err := unwrapStored(ctx, w, e)
		if err != nil {
			return n, err
		}
		wrapped, err := w.Wrap(ctx, key, []byte(e.Name))
		if err != nil {
			return n, fmt.Errorf("deployment key %s: %w", e.Name, err)
		}
		if err := st.ReplaceDeploymentKey(ctx, e.Name, e.Secret, wrapped); err != nil {
			return n, fmt.Errorf("rewrap deployment key %s: %w", e.Name, err)
		}
		n++
	}
	return n, nil
}

// Entry describes one stored key without its secret.
type Entry struct {
	Name string
	// MasterKeyID is the master key wrapping it; "" when it is stored raw.
	MasterKeyID string
	CreatedAt   time.Time
}

// Status lists the stored keys, never their secrets.
func Status(ctx context.Context, st Store) ([]Entry, error) {
	entries, err := st.ListDeploymentKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(entries))
	for _, e := range entries {
		out = append(out, Entry{Name: e.Name, MasterKeyID: masterkey.WrappedKeyID(e.Secret), CreatedAt: e.CreatedAt})
	}
	return out, nil
}
