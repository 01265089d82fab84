package deploykeys

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"path/filepath"
	"strings"
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

// startChain starts a registered chain under key, as the gateway does.
func startChain(t *testing.T, st store.Store, key []byte) *audit.Chain {
	t.Helper()
	c, err := audit.StartChain(context.Background(), st, key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLoadSealsAndMigrates: a fresh key is generated sealed; a key sealed before creation
// times were bound keeps its value and is sealed anew; a key stored raw stops the start until
// it is adopted; the same master key loads the same keys again; another master key stops the
// load with ErrWrongMasterKey.
func TestLoadSealsAndMigrates(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	w := master(t, "m1")
	oldCursor := bytes.Repeat([]byte{7}, 32)
	v1, err := w.Wrap(ctx, oldCursor, []byte(audit.KeyCursor)) // as the previous release sealed it
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.DeploymentKey(ctx, audit.KeyCursor, v1); err != nil {
		t.Fatal(err)
	}
	rawHash := bytes.Repeat([]byte{9}, 32)
	if _, err := st.DeploymentKey(ctx, audit.KeyInputHash, rawHash); err != nil { // as a version before wrapping stored it
		t.Fatal(err)
	}
	if _, err := Load(ctx, st, w); !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), "adopt-raw") {
		t.Fatalf("Load with a raw key = %v, want ErrUnauthenticated naming adopt-raw", err)
	}
	if adopted, err := AdoptRaw(ctx, st, w); err != nil || len(adopted) != 1 || adopted[0] != audit.KeyInputHash {
		t.Fatalf("AdoptRaw = %v, %v", adopted, err)
	}
	k, err := Load(ctx, st, w)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(k.Cursor, oldCursor) || !bytes.Equal(k.InputHash, rawHash) || len(k.Chain) != 32 || len(k.Chains) != 1 || !bytes.Equal(k.Chains[0], k.Chain) {
		t.Fatalf("Load = %+v", k)
	}
	entries, err := Status(ctx, st, w)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(Names) {
		t.Fatalf("Status = %+v", entries)
	}
	stored, _ := st.ListDeploymentKeys(ctx)
	for i, e := range entries {
		if e.MasterKeyID != "m1" || !e.Checked || e.Problem != "" || e.CreatedAt.Sub(stored[i].CreatedAt).Abs() > time.Second {
			t.Fatalf("%s: %+v (stored created %s)", e.Name, e, stored[i].CreatedAt)
		}
		o, err := open(ctx, w, stored[i])
		if err != nil || o.created.IsZero() {
			t.Fatalf("%s is not sealed with its creation time: %+v, %v", e.Name, o, err)
		}
	}
	for _, e := range stored {
		if bytes.Contains(e.Secret, oldCursor) || bytes.Contains(e.Secret, rawHash) || bytes.Contains(e.Secret, k.Chain) {
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

// TestDatabaseOnlyRekeyIsRefused is the attack of issue 35: with write access to the database
// and no master key, alter a record, re-chain the log under a key of one's own and insert that
// key as a retired chain key, raw or as a sealed secret copied from another row. The key is
// never taken (Load leaves it out and starts, ChainKeys leaves it out, Unauthenticated and
// Status name it), so the re-keyed chain does not verify.
func TestDatabaseOnlyRekeyIsRefused(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	w := master(t, "m1")
	if _, err := Load(ctx, st, w); err != nil {
		t.Fatal(err)
	}
	attacker := bytes.Repeat([]byte{1}, 32)
	forged := &audit.Log{Store: st, Chain: startChain(t, st, attacker)}
	if err := forged.Append(ctx, store.AuditRecord{ID: "inv_forged", Ref: "kb:page.read@1", Decision: audit.DecisionAllowed}); err != nil {
		t.Fatal(err)
	}
	forged.Close()
	stored, _ := st.ListDeploymentKeys(ctx)
	var cursorSealed []byte
	for _, e := range stored {
		if e.Name == audit.KeyCursor {
			cursorSealed = e.Secret
		}
	}
	for _, row := range []struct {
		name   string
		secret []byte
	}{{"audit-chain@1", attacker}, {"audit-chain@2", cursorSealed}, {"audit-chain@x", attacker}} {
		if _, err := st.DeploymentKey(ctx, row.name, row.secret); err != nil {
			t.Fatal(err)
		}
	}
	k, err := Load(ctx, st, w)
	if err != nil {
		t.Fatalf("Load with inserted retired keys = %v, want a start without them", err)
	}
	if len(k.Chains) != 1 {
		t.Fatalf("Load took %d chain keys, want only the deployment's own", len(k.Chains))
	}
	keys, err := ChainKeys(ctx, st, w)
	if err != nil || len(keys) != 1 || bytes.Equal(keys[0], attacker) {
		t.Fatalf("ChainKeys = %d keys, %v", len(keys), err)
	}
	problems, err := Unauthenticated(ctx, st, w)
	if err != nil || len(problems) != 3 {
		t.Fatalf("Unauthenticated = %+v, %v; want the three inserted rows", problems, err)
	}
	entries, _ := Status(ctx, st, w)
	named := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name, "audit-chain@") && e.Problem != "" {
			named++
		}
	}
	if named != 3 {
		t.Fatalf("Status names %d of the three inserted keys: %+v", named, entries)
	}
	if res, err := audit.Verify(ctx, st, keys, time.Time{}); err != nil || res.Verified {
		t.Fatalf("the re-keyed chain verified: %+v, %v", res, err)
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
	old := &audit.Log{Store: st, Chain: startChain(t, st, k1.Chain)}
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
	fresh := &audit.Log{Store: st, Chain: startChain(t, st, k2.Chain)}
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
	if err != nil || n != len(Names)+1 {
		t.Fatalf("Rewrap = %d, %v; want %d keys (one retired)", n, err, len(Names)+1)
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
