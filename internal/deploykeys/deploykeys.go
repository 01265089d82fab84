// Package deploykeys holds the per-deployment keys at rest: the search cursor key, the audit
// input-hash key and the audit chain key live in the store wrapped by the master key
// (masterkey.Wrapper), so reading the database alone forges no cursor and no chain head.
// It generates them at the deployment's first start, wraps keys stored raw by an older
// version, and rotates each one.
package deploykeys

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/masterkey"
	"github.com/xemahq/xema/internal/store"
)

// KeyTxnToken is the seed of the Ed25519 key that signs the Txn-Tokens of critical
// operations (internal/txntoken).
const KeyTxnToken = "txn-token-signing"

// Names are the per-deployment keys, in the order they are loaded.
var Names = []string{audit.KeyCursor, audit.KeyInputHash, audit.KeyChain, KeyTxnToken}

// retains are the keys a rotation retires rather than drops: what they signed must still
// verify (chains written before, Txn-Tokens in flight during a rolling restart).
var retains = map[string]bool{audit.KeyChain: true, KeyTxnToken: true}

// retiredKey reports whether name is a retired key (of a key retains keeps).
func retiredKey(name string) bool {
	base, _, ok := strings.Cut(name, retiredSep)
	return ok && retains[base]
}

// Consequences says, for each key, what rotating it does: `xema keys rotate` prints it.
var Consequences = map[string]string{
	audit.KeyCursor: "audit search cursors issued before the rotation stop working (a client starts its search again); " +
		"takes effect at each replica's next start",
	audit.KeyInputHash: "input hashes of records written after the rotation differ from those of equal inputs before it, " +
		"so equal inputs no longer match across the rotation; takes effect at each replica's next start",
	audit.KeyChain: "chains started after the rotation (each replica's next start) are keyed with the new key; the old key is " +
		"kept, so chains written before it still verify",
	KeyTxnToken: "Txn-Tokens are signed with the new key from each replica's next start; the old key stays published in the " +
		"gateway's JWKS, so tokens signed before verify",
}

// retiredSep separates a retired key's name from the time it was retired at, in RFC
// 3339 (audit-chain@2026-12-05T18:40:12.5Z), or in unix nanoseconds as versions before wrote it.
const retiredSep = "@"

// retiredName is the name a key retired at t is kept under.
func retiredName(name string, t time.Time) string {
	return name + retiredSep + t.UTC().Format(time.RFC3339Nano)
}

// retiredAt is the retirement time a retired key's name carries; false when name is not
// one or its time does not parse.
func retiredAt(name string) (time.Time, bool) {
	base, at, ok := strings.Cut(name, retiredSep)
	if !ok || !retains[base] {
		return time.Time{}, false
	}
	if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
		return t, true
	}
	nanos, err := strconv.ParseInt(at, 10, 64)
	return time.Unix(0, nanos), err == nil
}

// ErrUnauthenticated marks a stored key the master key does not vouch for: stored raw (by a
// version before wrapping, or by anyone with write access to the database), or sealed for
// another name. Such a key is never used: a raw one is taken only through AdoptRaw.
var ErrUnauthenticated = errors.New("not authenticated under the master key")

// Keys are the per-deployment keys, unwrapped.
type Keys struct {
	Cursor, InputHash []byte
	// Chain keys the chains this process writes; Chains are it and every retired chain key,
	// newest first, so chains written before a rotation still verify.
	Chain  []byte
	Chains [][]byte
	// TxnTokens are the Txn-Token signing seeds: the current one, then the retired ones
	// (still published), newest first.
	TxnTokens [][]byte
}

// Store keeps the per-deployment secrets (store.Store).
type Store interface {
	DeploymentKey(ctx context.Context, name string, candidate []byte) ([]byte, error)
	ListDeploymentKeys(ctx context.Context) ([]store.DeploymentKeyEntry, error)
	ReplaceDeploymentKey(ctx context.Context, name string, old, next []byte, created time.Time, keep ...store.DeploymentKeyEntry) error
}

// A key is sealed by the master key with its name as associated data and its creation time
// inside, after a format marker: the name, the time and the material are all authenticated,
// so a row inserted or altered by anyone without the master key (a copied secret under
// another name included) does not open. Keys sealed before the creation time was bound
// (aad: the name alone, plaintext: the material) still open; Load seals them anew.
const (
	sealMarker = "xema-deployment-key/2\x00"
	sealAAD    = "deployment-key/2:"
)

// opened is a stored key unwrapped: its material and the creation time sealed with it (zero
// for a key sealed before times were bound).
type opened struct {
	key     []byte
	created time.Time
}

// seal wraps key with its name and creation time.
func seal(ctx context.Context, w masterkey.Wrapper, name string, key []byte, created time.Time) ([]byte, error) {
	pt := make([]byte, 0, len(sealMarker)+8+len(key))
	pt = append(pt, sealMarker...)
	pt = binary.BigEndian.AppendUint64(pt, uint64(store.Stamp(created).UnixMicro()))
	pt = append(pt, key...)
	wrapped, err := w.Wrap(ctx, pt, []byte(sealAAD+name))
	if err != nil {
		return nil, fmt.Errorf("deployment key %s: %w", name, err)
	}
	return wrapped, nil
}

// open unwraps a stored entry. A raw entry, or one whose sealed content is no key, is
// ErrUnauthenticated; one that does not open is masterkey.ErrWrongMasterKey (the master key
// is not the deployment's, or the row was altered or copied from another name: the caller
// tells them apart by whether the deployment's current keys open).
func open(ctx context.Context, w masterkey.Wrapper, e store.DeploymentKeyEntry) (opened, error) {
	if !masterkey.IsWrapped(e.Secret) {
		return opened{}, fmt.Errorf("deployment key %s: %w: it is stored unwrapped (written by a version before wrapping, "+
			"or inserted into the database behind the gateway's back); after checking where it came from, run "+
			"'xema keys adopt-raw' to wrap it", e.Name, ErrUnauthenticated)
	}
	pt, err := w.Unwrap(ctx, e.Secret, []byte(sealAAD+e.Name))
	if err == nil {
		if len(pt) <= len(sealMarker)+8 || string(pt[:len(sealMarker)]) != sealMarker {
			return opened{}, fmt.Errorf("deployment key %s: %w: its sealed content is not a key", e.Name, ErrUnauthenticated)
		}
		micros := int64(binary.BigEndian.Uint64(pt[len(sealMarker):]))
		return opened{key: pt[len(sealMarker)+8:], created: time.UnixMicro(micros).UTC()}, nil
	}
	if key, legacyErr := w.Unwrap(ctx, e.Secret, []byte(e.Name)); legacyErr == nil { // sealed before creation times were bound
		return opened{key: key}, nil
	}
	return opened{}, fmt.Errorf("deployment key %s: %w: give the master key this deployment was started with (--master-key-file or %s); "+
		"if it is that key, the stored row was altered or copied from another name", e.Name, err, masterkey.EnvKey)
}

// Load unwraps every per-deployment key of st with w; a missing one is generated (the
// deployment's first start; replicas starting together agree on the first one stored), and
// a key sealed before creation times were bound is sealed anew. A current key the master key
// does not vouch for stops the load (ErrUnauthenticated); an unauthenticated retired chain
// key is left out (verify names it). A key wrapped under another master key fails with
// masterkey.ErrWrongMasterKey, naming both keys.
func Load(ctx context.Context, st Store, w masterkey.Wrapper) (Keys, error) {
	if err := bindTimes(ctx, st, w); err != nil {
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
	if _, err := load(ctx, st, w, KeyTxnToken); err != nil {
		return Keys{}, err
	}
	var err error
	if k.Chains, err = retainedKeys(ctx, st, w, audit.KeyChain); err != nil {
		return Keys{}, err
	}
	if k.TxnTokens, err = retainedKeys(ctx, st, w, KeyTxnToken); err != nil {
		return Keys{}, err
	}
	return k, nil
}

// load returns the unwrapped key name, generating (32 random bytes) and storing it sealed
// if none is stored.
func load(ctx context.Context, st Store, w masterkey.Wrapper, name string) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("deployment key %s: %w", name, err)
	}
	candidate, err := seal(ctx, w, name, fresh, time.Now())
	if err != nil {
		return nil, err
	}
	stored, err := st.DeploymentKey(ctx, name, candidate)
	if err != nil {
		return nil, fmt.Errorf("deployment key %s: %w", name, err)
	}
	o, err := open(ctx, w, store.DeploymentKeyEntry{Name: name, Secret: stored})
	if err != nil {
		return nil, err
	}
	return o.key, nil
}

// ChainKeys returns the audit chain keys of st the master key vouches for, the current one
// first, then the retired ones newest first. A current key that does not open is an error; a
// retired one is left out (Unauthenticated names it). It never generates one: a store
// without a chain key has none.
func ChainKeys(ctx context.Context, st Store, w masterkey.Wrapper) ([][]byte, error) {
	return retainedKeys(ctx, st, w, audit.KeyChain)
}

// retainedKeys is ChainKeys for any key a rotation retires (retains).
func retainedKeys(ctx context.Context, st Store, w masterkey.Wrapper, name string) ([][]byte, error) {
	entries, err := st.ListDeploymentKeys(ctx)
	if err != nil {
		return nil, err
	}
	var current []byte
	type retired struct {
		at  time.Time
		key []byte
	}
	var old []retired
	for _, e := range entries {
		switch {
		case e.Name == name:
			o, err := open(ctx, w, e)
			if err != nil {
				return nil, err
			}
			current = o.key
		case strings.HasPrefix(e.Name, name+retiredSep):
			at, ok := retiredAt(e.Name)
			o, err := open(ctx, w, e)
			if err != nil || !ok {
				continue // not vouched for: Unauthenticated names it
			}
			old = append(old, retired{at, o.key})
		}
	}
	slices.SortFunc(old, func(a, b retired) int { return b.at.Compare(a.at) })
	var keys [][]byte
	if current != nil {
		keys = append(keys, current)
	}
	for _, r := range old {
		keys = append(keys, r.key)
	}
	return keys, nil
}

// Problem is a stored key the master key does not vouch for, and why.
type Problem struct {
	Name, Why string
}

// Unauthenticated names every stored key the master key does not vouch for: one stored raw,
// a retired chain key that does not open under w (altered, or a secret copied under another
// name) or whose name carries no retirement time. A current key that does not open is an
// error: the master key is not the deployment's, or that row was altered.
func Unauthenticated(ctx context.Context, st Store, w masterkey.Wrapper) ([]Problem, error) {
	entries, err := st.ListDeploymentKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []Problem
	for _, e := range entries {
		_, err := open(ctx, w, e)
		retired := retiredKey(e.Name)
		switch {
		case err != nil && (retired || errors.Is(err, ErrUnauthenticated)):
			out = append(out, Problem{Name: e.Name, Why: err.Error()})
		case err != nil:
			return nil, err
		case retired:
			if _, ok := retiredAt(e.Name); !ok {
				out = append(out, Problem{Name: e.Name, Why: "a retired key's name must end in its retirement time (RFC 3339, or unix nanoseconds)"})
			}
		}
	}
	return out, nil
}

// bindTimes seals anew, in place, every key sealed before creation times were bound (its
// name and material already authenticated), with the creation time stored beside it. A
// current key the master key does not vouch for is an error; a retired one is left as it is
// and logged.
func bindTimes(ctx context.Context, st Store, w masterkey.Wrapper) error {
	entries, err := st.ListDeploymentKeys(ctx)
	if err != nil {
		return err
	}
	for _, e := range entries {
		o, err := open(ctx, w, e)
		if err != nil && retiredKey(e.Name) {
			slog.Warn("a stored retired key is not authenticated under the master key and is not used: 'xema keys status' and 'xema audit verify' name it",
				"key", e.Name)
			continue
		}
		if err != nil {
			return err
		}
		if !o.created.IsZero() {
			continue
		}
		sealed, err := seal(ctx, w, e.Name, o.key, e.CreatedAt)
		if err != nil {
			return err
		}
		// A replica sealing it at the same moment wins the compare-and-swap: its sealing is as good.
		if err := st.ReplaceDeploymentKey(ctx, e.Name, e.Secret, sealed, e.CreatedAt); err != nil && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("deployment key %s: bind its creation time: %w", e.Name, err)
		}
	}
	return nil
}

// AdoptRaw wraps, in place, every key stored raw, and returns their names: the explicit step
// that takes keys written by a version before wrapping (a raw key is otherwise never used).
// The caller audits it and must have checked where the keys came from: a raw row is exactly
// what an attacker with write access to the database would insert.
func AdoptRaw(ctx context.Context, st Store, w masterkey.Wrapper) ([]string, error) {
	entries, err := st.ListDeploymentKeys(ctx)
	if err != nil {
		return nil, err
	}
	var adopted []string
	for _, e := range entries {
		if masterkey.IsWrapped(e.Secret) {
			continue
		}
		sealed, err := seal(ctx, w, e.Name, e.Secret, e.CreatedAt)
		if err != nil {
			return adopted, err
		}
		if err := st.ReplaceDeploymentKey(ctx, e.Name, e.Secret, sealed, e.CreatedAt); err != nil {
			return adopted, fmt.Errorf("deployment key %s: adopt: %w", e.Name, err)
		}
		adopted = append(adopted, e.Name)
	}
	return adopted, nil
}

// Rotate replaces the key name with a fresh one, sealed by w. A chain key is retired under
// a name of its own (audit-chain@<retirement time, RFC 3339>), never dropped. Consequences[name] says
// what follows.
func Rotate(ctx context.Context, st Store, w masterkey.Wrapper, name string) error {
	if _, ok := Consequences[name]; !ok {
		return fmt.Errorf("%w: no per-deployment key %q: want one of %s", store.ErrInvalid, name, strings.Join(Names, ", "))
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
	current, err := open(ctx, w, old)
	if err != nil {
		return err
	}
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return fmt.Errorf("deployment key %s: %w", name, err)
	}
	now := time.Now()
	next, err := seal(ctx, w, name, fresh, now)
	if err != nil {
		return err
	}
	var keep []store.DeploymentKeyEntry
	if retains[name] {
		retired := retiredName(name, now)
		created := current.created
		if created.IsZero() {
			created = old.CreatedAt
		}
		resealed, err := seal(ctx, w, retired, current.key, created)
		if err != nil {
			return err
		}
		keep = append(keep, store.DeploymentKeyEntry{Name: retired, Secret: resealed, CreatedAt: created})
	}
	if err := st.ReplaceDeploymentKey(ctx, name, old.Secret, next, now, keep...); err != nil {
		return fmt.Errorf("rotate deployment key %s: %w", name, err)
	}
	return nil
}

// Rewrap seals every stored key under w's current master key (after a new master key was
// listed first in the master keyring, or a KMS key rotated) and returns how many changed. A
// key the master key does not vouch for stops it: adopt or remove it first.
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
		o, err := open(ctx, w, e)
		if err != nil {
			return n, err
		}
		created := o.created
		if created.IsZero() {
			created = e.CreatedAt
		}
		sealed, err := seal(ctx, w, e.Name, o.key, created)
		if err != nil {
			return n, err
		}
		if err := st.ReplaceDeploymentKey(ctx, e.Name, e.Secret, sealed, created); err != nil {
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
	// Checked is set when a master key was given: then Problem is why the master key does not
	// vouch for the key ("" when it does), and CreatedAt the creation time sealed with it
	// (the stored column's for a key sealed before times were bound).
	Checked bool
	Problem string
}

// Status lists the stored keys, never their secrets; with w (nil: not checked) it also says
// whether the master key vouches for each.
func Status(ctx context.Context, st Store, w masterkey.Wrapper) ([]Entry, error) {
	entries, err := st.ListDeploymentKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(entries))
	for _, e := range entries {
		en := Entry{Name: e.Name, MasterKeyID: masterkey.WrappedKeyID(e.Secret), CreatedAt: e.CreatedAt}
		if w != nil {
			en.Checked = true
			if o, err := open(ctx, w, e); err != nil {
				en.Problem = err.Error()
			} else if !o.created.IsZero() {
				en.CreatedAt = o.created
			}
		}
		out = append(out, en)
	}
	return out, nil
}
