package audit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// TestChainVerifies: records appended through a chained Log verify; a failed batch reuses its
// links, so the chain has no gap.
func TestChainVerifies(t *testing.T) {
	st, _ := openStore(t)
	key := []byte("k")
	l := &Log{Store: st, Chain: startChain(t, st, key)}
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

// TestDatabaseOnlyTamperingIsABreak: with write access to the database and no chain key, a
// tail cut with the head set back, a chain deleted whole (with or without its registration),
// a registration altered and an unchained record slipped in among the pre-chaining ones are
// each a break; the untouched log verifies and vouches for its newest record.
func TestDatabaseOnlyTamperingIsABreak(t *testing.T) {
	chainOf := func(id string) string { return `(SELECT chain_id FROM audit_log WHERE id = '` + id + `')` }
	for _, tc := range []struct {
		name  string
		stmts []string
		want  string
	}{
		{"tail cut, head set back", []string{`DROP TRIGGER audit_log_no_delete`,
			`UPDATE audit_chain_heads SET seq = 7, hash = (SELECT chain_hash FROM audit_log WHERE id = 'inv_c2_06') WHERE chain_id = ` + chainOf("inv_c2_06"),
			`DELETE FROM audit_log WHERE id IN ('inv_c2_07', 'inv_c2_08', 'inv_c2_09')`}, "head does not verify"},
		{"chain deleted, registration kept", []string{`DROP TRIGGER audit_log_no_delete`,
			`DELETE FROM audit_chain_heads WHERE chain_id = ` + chainOf("inv_c1_00"),
			`DELETE FROM audit_log WHERE id LIKE 'inv_c1_%'`}, "has disappeared"},
		{"chain deleted with its registration", []string{`DROP TRIGGER audit_log_no_delete`,
			`DELETE FROM audit_chains WHERE chain_id = ` + chainOf("inv_c0_00"),
			`DELETE FROM audit_chain_heads WHERE chain_id = ` + chainOf("inv_c0_00"),
			`DELETE FROM audit_log WHERE id LIKE 'inv_c0_%'`}, "registrations 1 to 1 are missing"},
		{"registration altered", []string{`UPDATE audit_chains SET registered_at = registered_at - 1 WHERE no = 2`},
			"registration 2 does not verify"},
		{"registration replaced by another's", []string{`UPDATE audit_chains SET anchor = '' WHERE no = 3`},
			"registration 3 does not verify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPruneFixture(t)
			if res := verifyLive(t, f); !res.Verified || res.Registered != 3 || res.Newest.ID != "inv_c0_09" {
				t.Fatalf("verify before tampering: %+v", res)
			}
			rawExec(t, f.path, tc.stmts...)
			res := verifyLive(t, f)
			if res.Verified || !strings.Contains(fmt.Sprint(res.Breaks), tc.want) {
				t.Fatalf("breaks %v, want one naming %q", res.Breaks, tc.want)
			}
		})
	}
	t.Run("unchained record inserted among the pre-chaining ones", func(t *testing.T) {
		f := newPruneFixture(t)
		old := record("legacy-forged")
		old.Time = f.t0.Add(-2 * time.Hour)
		if err := f.st.AppendAudit(context.Background(), old); err != nil {
			t.Fatal(err)
		}
		res := verifyLive(t, f)
		if res.Verified || !strings.Contains(fmt.Sprint(res.Breaks), "2 unchained record(s) where the chain registry sealed 1") {
			t.Fatalf("breaks %v, want the sealed count exceeded", res.Breaks)
		}
		// --since narrows the records judged one by one, never the sealed count.
		res, err := Verify(context.Background(), f.st, f.keys, f.t0)
		if err != nil || res.Verified || !strings.Contains(fmt.Sprint(res.Breaks), "2 unchained record(s)") {
			t.Fatalf("verify since %s: breaks %v, %v; want the sealed count exceeded", f.t0, res.Breaks, err)
		}
	})
}

// TestNewestChainOutsideTheRegistry: the newest chain's registration deleted and its head's
// MAC blanked, so that it would pass for a chain from before the registry (whose end is not
// vouched for): its records were written after the registry began, so it is a break.
func TestNewestChainOutsideTheRegistry(t *testing.T) {
	st, path := openStore(t)
	ctx := context.Background()
	key := []byte("k")
	for range 2 {
		l := &Log{Store: st, Chain: startChain(t, st, key)}
		for i := range 3 {
			if err := l.Append(ctx, record(fmt.Sprintf("inv_%s_%d", l.Chain.ID(), i))); err != nil {
				t.Fatal(err)
			}
		}
		l.Close()
	}
	if res, err := Verify(ctx, st, [][]byte{key}, time.Time{}); err != nil || !res.Verified {
		t.Fatalf("verify: %+v, %v", res, err)
	}
	rawExec(t, path, `DROP TRIGGER audit_log_no_delete`,
		`UPDATE audit_chain_heads SET mac = '' WHERE chain_id = (SELECT chain_id FROM audit_chains WHERE no = 2)`,
		`DELETE FROM audit_chains WHERE no = 2`)
	res, err := Verify(ctx, st, [][]byte{key}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verified || !strings.Contains(fmt.Sprint(res.Breaks), "outside the registry holds records written after the registry began") {
		t.Fatalf("breaks %v", res.Breaks)
	}
}

// TestMACsKnownAnswers pins the head and registration MACs' encodings: a change of either
// leaves every stored chain unverifiable.
func TestMACsKnownAnswers(t *testing.T) {
	key := []byte("k")
	ref := func(parts ...string) string {
		mac := hmac.New(sha256.New, key)
		for _, p := range parts {
			mac.Write([]byte(strconv.Itoa(len(p)) + ":" + p))
		}
		return "hmac-sha256:" + hex.EncodeToString(mac.Sum(nil))
	}
	if got, want := HeadMAC(key, "ch_1", 12, "h12"), ref("xema-chain-head", "ch_1", "12", "h12"); got != want {
		t.Fatalf("HeadMAC %s, want %s", got, want)
	}
	at := time.Date(2026, 12, 5, 13, 0, 0, 123456000, time.UTC)
	reg := store.ChainRegistration{No: 3, ChainID: "ch_1", RegisteredAt: at, Legacy: 0, Anchor: "hmac-sha256:ab"}
	if got, want := RegistrationMAC(key, reg), ref("xema-chain-registration", "3", "ch_1", "2026-12-05T13:00:00.123456Z", "0", "hmac-sha256:ab"); got != want {
		t.Fatalf("RegistrationMAC %s, want %s", got, want)
	}
	if HeadMAC(key, "ch_1", 1, "2h") == HeadMAC(key, "ch_1", 12, "h") {
		t.Fatal("seq and hash run together")
	}
}
