package audit

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/sqlite"
)

// pruneFixture is a log of three chains: two under the old chain key, one under the key
// that replaced it, records an hour apart from t0, and one legacy unchained record.
type pruneFixture struct {
	st   store.Store
	path string
	keys [][]byte // current first
	t0   time.Time
}

func newPruneFixture(t *testing.T) pruneFixture {
	t.Helper()
	st, path := openStore(t)
	ctx := context.Background()
	f := pruneFixture{st: st, path: path, keys: [][]byte{[]byte("new chain key"), []byte("old chain key")},
		t0: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)}
	legacy := record("legacy-0")
	legacy.Time = f.t0.Add(-time.Hour)
	if err := st.AppendAudit(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	for c, key := range [][]byte{f.keys[1], f.keys[1], f.keys[0]} {
		l := &Log{Store: st, Chain: startChain(t, st, key)}
		for i := range 10 {
			r := record(fmt.Sprintf("inv_c%d_%02d", c, i))
			r.Time = f.t0.Add(time.Duration(i) * time.Hour)
			if err := l.Append(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		l.Close()
	}
	return f
}

// rawExec runs statements on the store's file around the store (and its triggers, once dropped).
func rawExec(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", sqlite.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func verifyLive(t *testing.T, f pruneFixture) VerifyResult {
	t.Helper()
	res, err := Verify(context.Background(), f.st, f.keys, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestPruneArchiveVerify: a prune with an archive removes the records before the boundary in
// every chain (whichever key wrote it), the live log still verifies from the checkpoints, the
// archive verifies alone, and a second prune continues from the first's checkpoints.
func TestPruneArchiveVerify(t *testing.T) {
	f := newPruneFixture(t)
	ctx := context.Background()
	dir := t.TempDir()
	prune := func(name string, before time.Time) (PruneResult, string) {
		t.Helper()
		path := filepath.Join(dir, name)
		a, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		res, err := Prune(ctx, f.st, f.keys, PruneOptions{Before: before, Archive: a, Batch: 2})
		if err != nil {
			t.Fatal(err)
		}
		return res, path
	}
	res, first := prune("first.jsonl.gz", f.t0.Add(4*time.Hour+time.Minute)) // records 0..4 of each chain
	if res.Chains != 3 || res.Deleted != 16 || res.Archived != 16 {
		t.Fatalf("first prune = %+v, want 3 chains, 15 chained + 1 legacy record deleted and archived", res)
	}
	live := verifyLive(t, f)
	if !live.Verified || live.Records != 15 || live.Pending != 0 || !live.Pruned.Before.Equal(f.t0.Add(4*time.Hour+time.Minute)) {
		t.Fatalf("live verify after prune = %+v", live)
	}
	ar := verifyArchive(t, first, f.keys)
	if !ar.Verified || ar.Records != 16 || ar.Unchained != 1 || len(ar.Manifest.Chains) != 3 {
		t.Fatalf("archive verify = %+v", ar)
	}
	res, second := prune("second.jsonl.gz", f.t0.Add(7*time.Hour+time.Minute))
	if res.Chains != 3 || res.Deleted != 9 {
		t.Fatalf("second prune = %+v", res)
	}
	if live := verifyLive(t, f); !live.Verified || live.Records != 6 {
		t.Fatalf("live verify after the second prune = %+v", live)
	}
	ar = verifyArchive(t, second, f.keys)
	if !ar.Verified || ar.Records != 9 || ar.Manifest.Chains[0].FromSeq != 6 || ar.Manifest.Chains[0].FromMAC == "" {
		t.Fatalf("second archive = %+v", ar)
	}
	// Nothing older than a checkpoint: a prune at the same boundary removes nothing.
	if res, _ := prune("third.jsonl.gz", f.t0.Add(7*time.Hour+time.Minute)); res.Chains != 0 || res.Deleted != 0 {
		t.Fatalf("a repeated prune = %+v", res)
	}
	// Without the chain keys nothing verifies.
	if ar := verifyArchive(t, first, [][]byte{[]byte("another deployment")}); ar.Verified {
		t.Fatal("an archive verified under another deployment's key")
	}
}

func verifyArchive(t *testing.T, path string, keys [][]byte) ArchiveResult {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	res, err := VerifyArchive(fh, keys)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestArchiveTamperDetected: an altered record, a removed one, a truncated archive, a segment
// dropped from the manifest, a cut-off start, an altered end: each is a break.
func TestArchiveTamperDetected(t *testing.T) {
	f := newPruneFixture(t)
	ctx := context.Background()
	// A first prune so the archive under test starts after a checkpoint (FromMAC in play).
	if _, err := Prune(ctx, f.st, f.keys, PruneOptions{Before: f.t0.Add(time.Hour + time.Minute)}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := Prune(ctx, f.st, f.keys, PruneOptions{Before: f.t0.Add(5*time.Hour + time.Minute), Archive: nopSync{&buf}}); err != nil {
		t.Fatal(err)
	}
	lines := gunzipLines(t, buf.Bytes())
	if res, err := VerifyArchive(bytes.NewReader(gzipLines(t, lines)), f.keys); err != nil || !res.Verified {
		t.Fatalf("the untouched archive: %+v, %v", res, err)
	}
	recordAt := func(i int) int { return 1 + i } // line 0 is the manifest
	for _, tc := range []struct {
		name   string
		mutate func(ls []string) []string
		want   string
	}{
		{"altered record", func(ls []string) []string {
			ls[recordAt(2)] = strings.Replace(ls[recordAt(2)], `"decision":"allowed"`, `"decision":"denied"`, 1)
			return ls
		}, "hash mismatch"},
		{"removed record", func(ls []string) []string { return append(ls[:recordAt(1):recordAt(1)], ls[recordAt(2):]...) }, "expected seq"},
		{"removed last record of a segment", func(ls []string) []string {
			return append(ls[:recordAt(3):recordAt(3)], ls[recordAt(4):]...)
		}, "records at its end were removed"},
		{"truncated", func(ls []string) []string { return ls[:len(ls)-1] }, "truncated"},
		{"segment dropped from the manifest", func(ls []string) []string {
			i := strings.Index(ls[0], `{"chainId"`)
			j := strings.Index(ls[0][i+1:], `{"chainId"`) + i + 1
			ls[0] = ls[0][:i] + ls[0][j:]
			return ls
		}, "manifest does not verify"},
		{"start cut off", func(ls []string) []string {
			ls[0] = strings.Replace(ls[0], `"fromSeq":3`, `"fromSeq":4`, 1)
			return ls
		}, "manifest does not verify"},
		{"end altered", func(ls []string) []string {
			ls[len(ls)-1] = strings.Replace(ls[len(ls)-1], `"records":12`, `"records":11`, 1)
			return ls
		}, "end line does not verify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mutated := tc.mutate(append([]string(nil), lines...))
			res, err := VerifyArchive(bytes.NewReader(gzipLines(t, mutated)), f.keys)
			if err != nil {
				t.Fatal(err)
			}
			if res.Verified || !strings.Contains(fmt.Sprint(res.Breaks), tc.want) {
				t.Fatalf("breaks %v, want one naming %q", res.Breaks, tc.want)
			}
		})
	}
	for _, bad := range [][]byte{[]byte("not gzip"), gzipLines(t, []string{`{"record":{}}`}), gzipLines(t, []string{"not json"})} {
		if _, err := VerifyArchive(bytes.NewReader(bad), f.keys); !errors.Is(err, ErrNotArchive) {
			t.Errorf("VerifyArchive(%q) = %v, want ErrNotArchive", bad, err)
		}
	}
}

// TestTamperNeverHidesBehindPruning: after a prune, a record altered or deleted above a
// checkpoint, and a checkpoint moved by hand, are breaks; a prune refuses to erase a segment
// that does not verify.
func TestTamperNeverHidesBehindPruning(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stmts []string
		want  string
	}{
		{"altered above the checkpoint", []string{`DROP TRIGGER audit_log_no_update`,
			`UPDATE audit_log SET decision = 'denied' WHERE id = 'inv_c0_05'`}, "hash mismatch"},
		{"deleted just above the checkpoint", []string{`DROP TRIGGER audit_log_no_delete`,
			`DELETE FROM audit_log WHERE id = 'inv_c1_03'`}, "expected seq"},
		{"checkpoint moved over a deletion", []string{`DROP TRIGGER audit_log_no_delete`,
			`DELETE FROM audit_log WHERE id IN ('inv_c2_03', 'inv_c2_04')`,
			`UPDATE audit_chain_heads SET base_seq = 5, base_hash = (SELECT chain_hash FROM audit_log WHERE id = 'inv_c2_05') WHERE base_seq = 3 AND chain_id = (SELECT chain_id FROM audit_log WHERE id = 'inv_c2_05')`},
			"prune checkpoint does not verify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPruneFixture(t)
			ctx := context.Background()
			if _, err := Prune(ctx, f.st, f.keys, PruneOptions{Before: f.t0.Add(2*time.Hour + time.Minute)}); err != nil {
				t.Fatal(err)
			}
			if res := verifyLive(t, f); !res.Verified {
				t.Fatalf("verify after prune: %+v", res.Breaks)
			}
			rawExec(t, f.path, tc.stmts...)
			res := verifyLive(t, f)
			if res.Verified || !strings.Contains(fmt.Sprint(res.Breaks), tc.want) {
				t.Fatalf("breaks %v, want one naming %q", res.Breaks, tc.want)
			}
			// Pruning past the tampering would erase its evidence: refused.
			_, err := Prune(ctx, f.st, f.keys, PruneOptions{Before: f.t0.Add(8 * time.Hour)})
			if err == nil || !strings.Contains(err.Error(), "prune refused") {
				t.Fatalf("prune over tampered records = %v, want refused", err)
			}
		})
	}
}

// TestVerifyPendingPrune: records beneath a checkpoint not deleted yet (a prune cut short)
// are skipped, not breaks, and the next prune deletes them.
func TestVerifyPendingPrune(t *testing.T) {
	f := newPruneFixture(t)
	ctx := context.Background()
	links, err := f.st.LastLinksBefore(ctx, f.t0.Add(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// Checkpoint exactly as Prune does (each base's MAC under its chain's key), then stop
	// before deleting: a prune cut short.
	var bases []store.ChainHead
	for _, l := range links {
		var first store.AuditRecord
		_ = f.st.ScanAudit(ctx, store.AuditFilter{ChainID: l.ChainID}, func(r store.AuditRecord) error {
			first = r
			return errStop
		})
		h := store.ChainHead{ChainID: l.ChainID, BaseSeq: l.Seq, BaseHash: l.Hash}
		k := f.keys[chainKey(f.keys, store.ChainHead{ChainID: l.ChainID}, &first, "")]
		h.BaseMAC = BaseMAC(k, l.ChainID, l.Seq, l.Hash)
		bases = append(bases, h)
	}
	if err := f.st.CheckpointPrune(ctx, store.PruneBoundary{Before: f.t0.Add(3 * time.Hour), PrunedAt: time.Now()}, bases); err != nil {
		t.Fatal(err)
	}
	res := verifyLive(t, f)
	if !res.Verified || res.Pending != 9 || res.Records != 21 {
		t.Fatalf("verify with a prune pending = %+v", res)
	}
	pr, err := Prune(ctx, f.st, f.keys, PruneOptions{Before: f.t0.Add(3 * time.Hour)})
	if err != nil || pr.Deleted != 10 { // the 9 pending and the legacy record
		t.Fatalf("the next prune = %+v, %v", pr, err)
	}
	if res := verifyLive(t, f); !res.Verified || res.Pending != 0 {
		t.Fatalf("verify after = %+v", res)
	}
}

type nopSync struct{ *bytes.Buffer }

func (nopSync) Sync() error { return nil }

func gunzipLines(t *testing.T, b []byte) []string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func gzipLines(t *testing.T, lines []string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	for _, l := range lines {
		fmt.Fprintln(zw, l)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestArchiveCoversUnchainedLines: an archive's unchained lines are chained in its end, so
// altering one is a break, not only removing one.
func TestArchiveCoversUnchainedLines(t *testing.T) {
	f := newPruneFixture(t)
	var buf bytes.Buffer
	if _, err := Prune(context.Background(), f.st, f.keys, PruneOptions{Before: f.t0.Add(time.Hour + time.Minute), Archive: nopSync{&buf}}); err != nil {
		t.Fatal(err)
	}
	lines := gunzipLines(t, buf.Bytes())
	if res, err := VerifyArchive(bytes.NewReader(gzipLines(t, lines)), f.keys); err != nil || !res.Verified || res.Unchained != 1 {
		t.Fatalf("the untouched archive: %+v, %v", res, err)
	}
	altered := 0
	for i, l := range lines {
		if strings.Contains(l, `"id":"legacy-0"`) {
			lines[i] = strings.Replace(l, `"decision":"allowed"`, `"decision":"denied"`, 1)
			altered++
		}
	}
	if altered != 1 {
		t.Fatalf("the archive holds the unchained record %d times", altered)
	}
	res, err := VerifyArchive(bytes.NewReader(gzipLines(t, lines)), f.keys)
	if err != nil {
		t.Fatal(err)
	}
	if res.Verified || !strings.Contains(fmt.Sprint(res.Breaks), "unchained lines do not match") {
		t.Fatalf("breaks %v, want the unchained line's alteration", res.Breaks)
	}
}
