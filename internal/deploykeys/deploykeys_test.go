package deploykeys

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/masterkey"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/sqlite"
)

func master(t *testing.T, kid string) masterkey.Wrapper {
	t.Helper()
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		t.Fatal(err)
	}
	w, err := masterkey.Source{Inline: kid + "=" + base64.StdEncoding.EncodeToString(raw[:])}.Open(false)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "xema.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestLoadWrapsAndMigrates: keys stored raw by an older version keep their value and end
// wrapped; a fresh key is generated wrapped; the same master key loads the same keys again;
// another master key stops the load with ErrWrongMasterKey.
func TestLoadWrapsAndMigrates(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	rawCursor := bytes.Repeat([]byte{7}, 32)
	if _, err := st.DeploymentKey(ctx, audit.KeyCursor, rawCursor); err != nil { // as a version before wrapping stored it
		t.Fatal(err)
	}
	w := master(t, "m1")
	k, err := Load(ctx, st, w)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(k.Cursor, rawCursor) || len(k.InputHash) != 32 || len(k.Chain) != 32 || len(k.Chains) != 1 || !bytes.Equal(k.Chains[0], k.Chain) {
		t.Fatalf("Load = %+v", k)
	}
	entries, err := Status(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Fatalf("Status = %+v", entries)
	}
	for _, e := range entries {
		if e.MasterKeyID != "m1" {
			t.Fatalf("%s is not wrapped by m1: %+v", e.Name, e)
		}
	}
	stored, _ := st.ListDeploymentKeys(ctx)
	for _, e := range stored {
		if bytes.Contains(e.Secret, rawCursor) || bytes.Contains(e.Secret, k.Chain) {
			t.Fatalf("%s is stored in the clear", e.Name)
		}
	}
	again, err := Load(ctx, st, w)
	if err != nil || !bytes.Equal(again.Chain, k.Chain) || !bytes.Equal(again.InputHash, k.InputHash) {
		t.Fatalf("a second Load = %+v, %v", again, err)
	}
	if _, err := Load(ctx, st, master(t, "m2")); !errors.Is(err, masterkey.ErrWrongMasterKey) {
		t.Fatalf("Load under another master key = %v, want ErrWrongMasterKey", err)
	}
	if _, err := ChainKeys(ctx, st, master(t, "m2")); !errors.Is(err, masterkey.ErrWrongMasterKey) {
		t.Fatalf("ChainKeys under another master key = %v, want ErrWrongMasterKey", err)
	}
}

// TestRotate: each key rotates to a fresh one; a rotated chain key is retired, not dropped,
// so a chain written under it still verifies beside a chain under the new key; an unknown
// name and a deployment never started are refused.
func TestRotate(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	w := master(t, "m1")
	if err := Rotate(ctx, st, w, audit.KeyChain); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rotate before the first start = %v, want ErrNotFound", err)
	}
	k1, err := Load(ctx, st, w)
	if err != nil {
		t.Fatal(err)
	}
	if err := Rotate(ctx, st, w, "master"); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("rotate an unknown key = %v, want ErrInvalid", err)
	}
	old := &audit.Log{Store: st, Chain: audit.NewChain(k1.Chain)}
	rec := store.AuditRecord{ID: "inv_before", Ref: "kb:page.read@1", Decision: audit.DecisionAllowed, Time: time.Now()}
	if err := old.Append(ctx, rec); err != nil {
		t.Fatal(err)
	}
	old.Close()
	for _, name := range Names {
		if err := Rotate(ctx, st, w, name); err != nil {
			t.Fatalf("rotate %s: %v", name, err)
		}
	}
	k2, err := Load(ctx, st, w)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(k2.Cursor, k1.Cursor) || bytes.Equal(k2.InputHash, k1.InputHash) || bytes.Equal(k2.Chain, k1.Chain) {
		t.Fatal("a rotated key kept its value")
	}
	if len(k2.Chains) != 2 || !bytes.Equal(k2.Chains[0], k2.Chain) || !bytes.Equal(k2.Chains[1], k1.Chain) {
		t.Fatalf("chain keys after rotation: %d, want the new one then the retired one", len(k2.Chains))
	}
	if audit.InputHash(k1.InputHash, []byte("x")) == audit.InputHash(k2.InputHash, []byte("x")) {
		t.Fatal("the input hash did not change with its key")
	}
	fresh := &audit.Log{Store: st, Chain: audit.NewChain(k2.Chain)}
	rec.ID = "inv_after"
	if err := fresh.Append(ctx, rec); err != nil {
		t.Fatal(err)
	}
	fresh.Close()
	res, err := audit.Verify(ctx, st, k2.Chains, time.Time{})
	if err != nil || !res.Verified || res.Chains != 2 {
		t.Fatalf("verify across a chain key rotation = %+v, %v", res, err)
	}
	if res, _ := audit.Verify(ctx, st, k2.Chains[:1], time.Time{}); res.Verified {
		t.Fatal("the old chain verified without its retired key")
	}
}

// TestRewrap: after a new master key is listed first, Rewrap wraps every key under it and the
// old master key alone no longer opens them.
func TestRewrap(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	var a, b [32]byte
	_, _ = rand.Read(a[:])
	_, _ = rand.Read(b[:])
	oldSpec := "m1=" + base64.StdEncoding.EncodeToString(a[:])
	newSpec := "m2=" + base64.StdEncoding.EncodeToString(b[:])
	oldW, _ := masterkey.Source{Inline: oldSpec}.Open(false)
	both, _ := masterkey.Source{Inline: newSpec + "\n" + oldSpec}.Open(false)
	newW, _ := masterkey.Source{Inline: newSpec}.Open(false)
	k1, err := Load(ctx, st, oldW)
	if err != nil {
		t.Fatal(err)
	}
	if err := Rotate(ctx, st, oldW, audit.KeyChain); err != nil { // a retired key is rewrapped too
		t.Fatal(err)
	}
	n, err := Rewrap(ctx, st, both)
	if err != nil || n != 4 {
		t.Fatalf("Rewrap = %d, %v; want 4 keys", n, err)
	}
	if n, _ := Rewrap(ctx, st, both); n != 0 {
		t.Fatalf("a second Rewrap changed %d keys", n)
	}
	k2, err := Load(ctx, st, newW)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(k2.Cursor, k1.Cursor) || !bytes.Equal(k2.Chains[1], k1.Chain) {
		t.Fatal("rewrapping changed a key")
	}
	if _, err := Load(ctx, st, oldW); !errors.Is(err, masterkey.ErrWrongMasterKey) {
		t.Fatalf("the old master key after rewrap = %v", err)
	}
}
