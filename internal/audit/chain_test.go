package audit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// TestChainVerifies: records appended through a chained Log verify; a failed batch reuses its
// links, so the chain has no gap.
func TestChainVerifies(t *testing.T) {
	st, _ := openStore(t)
	key := []byte("k")
	l := &Log{Store: st, Chain: NewChain(key)}
	ctx := context.Background()
	for i := range 20 {
		if err := l.Append(ctx, record(fmt.Sprintf("inv_%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// A record the store refuses (a stored id) fails its batch: its link is given back.
	if err := l.Append(ctx, record("inv_3")); err == nil {
		t.Fatal("a duplicate id was appended")
	}
	if err := l.Append(ctx, record("inv_last")); err != nil {
		t.Fatal(err)
	}
	l.Close()
	res, err := Verify(ctx, st, [][]byte{key}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Verified || res.Chains != 1 || res.Records != 21 {
		t.Fatalf("verify: %+v", res)
	}
	if res, _ := Verify(ctx, st, [][]byte{[]byte("other key")}, time.Time{}); res.Verified {
		t.Fatal("verified under another key")
	}
}

func TestLinkHashCoversEveryColumn(t *testing.T) {
	base := record("inv_x")
	base.PolicyInput = json.RawMessage(`{"ref":"a"}`)
	base.Chain = store.ChainLink{ChainID: "ch_1", Seq: 4}
	h := LinkHash([]byte("k"), "prev", base)
	for name, mutate := range map[string]func(r *store.AuditRecord){
		"org": func(r *store.AuditRecord) { r.Org = "beta" }, "decision": func(r *store.AuditRecord) { r.Decision = "allowed" },
		"reasons": func(r *store.AuditRecord) { r.Reasons = json.RawMessage(`[]`) }, "time": func(r *store.AuditRecord) { r.Time = r.Time.Add(time.Microsecond) },
		"policy input": func(r *store.AuditRecord) { r.PolicyInput = nil }, "seq": func(r *store.AuditRecord) { r.Chain.Seq = 5 },
		"outcome": func(r *store.AuditRecord) { r.Outcome = "ok" }, "latency": func(r *store.AuditRecord) { r.LatencyMicros++ },
	} {
		r := base
		mutate(&r)
		if LinkHash([]byte("k"), "prev", r) == h {
			t.Errorf("changing %s keeps the hash", name)
		}
	}
	if LinkHash([]byte("k"), "other", base) == h {
		t.Error("the previous hash is not covered")
	}
}

// BenchmarkLinkHash is the chain's CPU cost per record as the writer seals it, apart from the store.
func BenchmarkLinkHash(b *testing.B) {
	r := record("inv_bench")
	r.PolicyInput = json.RawMessage(`{"ref":"kb:page.read@1","subject":{"kind":"agent","ref":"agent:a"},"org":"acme","environment":"project","armed":["*"]}`)
	c := NewChain([]byte("k"))
	rs := []store.AuditRecord{r}
	b.ReportAllocs()
	for b.Loop() {
		c.seal(rs)
	}
}

// TestLinkHashEncoding: LinkHash is the HMAC of every column length-prefixed ("len:value"),
// as its doc says and as the chain's first records were hashed: a reference encoding written
// plainly here must give the same hash, and two records whose integer and next string
// columns would run together without prefixes must not.
func TestLinkHashEncoding(t *testing.T) {
	key := []byte("k")
	reference := func(prev string, r store.AuditRecord) string {
		mac := hmac.New(sha256.New, key)
		for _, p := range []string{prev, r.ID, r.Org, store.Stamp(r.Time).Format("2006-01-02T15:04:05.000000Z"), r.Ref,
			r.SubjectKind, r.SubjectRef, r.Environment, r.Decision, string(r.Reasons), string(r.Suggestions),
			string(r.Obligations), r.BundleRevision, r.InputHash, r.Runner, r.Outcome,
			strconv.FormatInt(r.LatencyMicros, 10), r.ParentID, string(r.Detail), string(r.PolicyInput),
			r.Chain.ChainID, strconv.FormatInt(r.Chain.Seq, 10)} {
			mac.Write([]byte(strconv.Itoa(len(p)) + ":" + p))
		}
		return "hmac-sha256:" + hex.EncodeToString(mac.Sum(nil))
	}
	a := record("inv_a")
	a.Time = time.Date(2026, 12, 1, 15, 4, 5, 123456000, time.UTC)
	a.LatencyMicros, a.ParentID, a.Chain = 1, "23", store.ChainLink{ChainID: "c1", Seq: 7}
	b := a
	b.LatencyMicros, b.ParentID = 12, "3"
	for _, r := range []store.AuditRecord{a, b} {
		if got, want := LinkHash(key, "prev", r), reference("prev", r); got != want {
			t.Fatalf("LinkHash %s, want the length-prefixed encoding's %s", got, want)
		}
	}
	if LinkHash(key, "prev", a) == LinkHash(key, "prev", b) {
		t.Fatal("latency 1 + parent 23 and latency 12 + parent 3 hash alike")
	}
}
