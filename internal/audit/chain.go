package audit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strconv"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// KeyChain names the per-deployment secret the audit hash chain is keyed with, so rewriting
// a chain takes that key as well as write access to the log.
const KeyChain = "audit-chain"

// Chain links the records one process writes into a hash chain: each record's hash covers
// every stored column of it and the previous record's hash, and its Seq counts from 1. One
// chain per process (a replica, a restart) keeps group commit lock-free across replicas; the
// store checkpoints each chain's head in the batch's transaction (store.ChainHead), so a
// deleted tail, a deleted record, an altered one or one inserted behind the gateway's back
// breaks verification (Verify).
type Chain struct {
	id  string
	key []byte

	mu   sync.Mutex
	seq  int64
	head string
	mac  hash.Hash // the HMAC under key, reused: New hashes the key's pads again each time
}

// NewChain starts a chain with a fresh id under key.
func NewChain(key []byte) *Chain {
	return &Chain{id: NewID("ch_"), key: key, mac: hmac.New(sha256.New, key)}
}

// ID is the chain's id.
func (c *Chain) ID() string { return c.id }

// seal links rs after the chain's head and returns the state to restore if their batch
// fails to commit. Times are stamped first: the hash covers what the store keeps.
func (c *Chain) seal(rs []store.AuditRecord) (undoSeq int64, undoHead string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	undoSeq, undoHead = c.seq, c.head
	for i := range rs {
		rs[i].Time = store.Stamp(rs[i].Time)
		c.seq++
		rs[i].Chain = store.ChainLink{ChainID: c.id, Seq: c.seq}
		rs[i].Chain.Hash = linkHash(c.mac, c.head, rs[i])
		c.head = rs[i].Chain.Hash
	}
	return undoSeq, undoHead
}

// undo restores the state seal returned: the batch was not stored, its links are reused.
func (c *Chain) undo(seq int64, head string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq, c.head = seq, head
}

// LinkHash is the chain hash of r after prev: an HMAC-SHA256 under key of prev and every
// stored column of r, each length-prefixed so no two records encode alike.
func LinkHash(key []byte, prev string, r store.AuditRecord) string {
	return linkHash(hmac.New(sha256.New, key), prev, r)
}

// linkHash is LinkHash with mac, an HMAC-SHA256 under the key, reset first.
func linkHash(mac hash.Hash, prev string, r store.AuditRecord) string {
	bp := linkBufs.Get().(*[]byte)
	b := (*bp)[:0]
	put := func(p string) {
		b = strconv.AppendInt(b, int64(len(p)), 10)
		b = append(b, ':')
		b = append(b, p...)
	}
	putBytes := func(p []byte) {
		b = strconv.AppendInt(b, int64(len(p)), 10)
		b = append(b, ':')
		b = append(b, p...)
	}
	putInt := func(v int64) {
		var digits [20]byte
		putBytes(strconv.AppendInt(digits[:0], v, 10))
	}
	put(prev)
	put(r.ID)
	put(r.Org)
	b = store.Stamp(r.Time).AppendFormat(append(b, "27:"...), "2006-01-02T15:04:05.000000Z")
	for _, p := range []string{r.Ref, r.SubjectKind, r.SubjectRef, r.Environment, r.Decision} {
		put(p)
	}
	for _, p := range [][]byte{r.Reasons, r.Suggestions, r.Obligations} {
		putBytes(p)
	}
	for _, p := range []string{r.BundleRevision, r.InputHash, r.Runner, r.Outcome} {
		put(p)
	}
	putInt(r.LatencyMicros)
	put(r.ParentID)
	putBytes(r.Detail)
	putBytes(r.PolicyInput)
	put(r.Chain.ChainID)
	putInt(r.Chain.Seq)
	mac.Reset()
	mac.Write(b)
	*bp = b
	linkBufs.Put(bp)
	var sum [sha256.Size]byte
	return "hmac-sha256:" + hex.EncodeToString(mac.Sum(sum[:0]))
}

// linkBufs recycles the buffers LinkHash encodes a record into.
var linkBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// Break is the first place a chain does not verify.
type Break struct {
	ChainID  string
	Seq      int64
	RecordID string
	Problem  string
}

func (b Break) Error() string {
	if b.RecordID == "" {
		return fmt.Sprintf("chain %s at seq %d: %s", b.ChainID, b.Seq, b.Problem)
	}
	return fmt.Sprintf("chain %s at seq %d (record %s): %s", b.ChainID, b.Seq, b.RecordID, b.Problem)
}

// VerifyResult counts what Verify read.
type VerifyResult struct {
	Chains  int
	Records int // chained records verified
	Legacy  int // records older than every chain (written before chaining existed)
	// Pending counts records at or below their chain's prune checkpoint not deleted yet (a
	// prune under way, or one interrupted): they are beyond the verified range.
	Pending int
	// Pruned is the last prune's boundary (zero when the log was never pruned): each chain
	// is verified from its checkpoint on.
	Pruned   store.PruneBoundary
	Breaks   []Break
	Verified bool
}

// BaseMAC authenticates a chain's prune checkpoint (its last pruned link) under the chain's
// key: a checkpoint moved by anyone without the key does not verify.
func BaseMAC(key []byte, chainID string, seq int64, hash string) string {
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "xema-prune-base\x00%d:%s%d:%d%d:%s", len(chainID), chainID, len(strconv.FormatInt(seq, 10)), seq, len(hash), hash)
	return "hmac-sha256:" + hex.EncodeToString(mac.Sum(nil))
}

// chainKey picks, among keys (the current chain key first, then retired ones), the one a
// chain was written under: the one its checkpoint's MAC verifies under, or else its first
// record's link. -1 when none does.
func chainKey(keys [][]byte, h store.ChainHead, first *store.AuditRecord, prev string) int {
	for i, k := range keys {
		switch {
		case h.BaseSeq > 0:
			if hmac.Equal([]byte(BaseMAC(k, h.ChainID, h.BaseSeq, h.BaseHash)), []byte(h.BaseMAC)) {
				return i
			}
		case first != nil:
			if LinkHash(k, prev, *first) == first.Chain.Hash {
				return i
			}
		}
	}
	return -1
}

// Verifier is the store as Verify reads the log (store.Store).
type Verifier interface {
	ChainHeads(ctx context.Context) ([]store.ChainHead, error)
	PruneBoundary(ctx context.Context) (store.PruneBoundary, error)
	ScanAudit(ctx context.Context, f store.AuditFilter, fn func(store.AuditRecord) error) error
}

// Verify re-derives every chain of the store from its records and checks it against the
// checkpointed heads: an altered record, a deleted one (a gap, or a tail shorter than its
// head), one inserted out of order or behind the gateway's back (unchained, or of an unknown
// chain) is a Break; the first of each chain is reported, in chain order. keys are the
// chain keys, current first: each chain is verified under the one it was written with, so
// chains written before a key rotation still verify. A pruned chain is verified from its
// checkpoint (whose MAC must verify) on: a prune is no break, a deletion above the
// checkpoint is one. Only breaks at records from since on are reported (zero: all). It
// only reads.
func Verify(ctx context.Context, st Verifier, keys [][]byte, since time.Time) (VerifyResult, error) {
	var res VerifyResult
	heads, err := st.ChainHeads(ctx)
	if err != nil {
		return res, err
	}
	if res.Pruned, err = st.PruneBoundary(ctx); err != nil {
		return res, err
	}
	if len(heads) > 0 && len(keys) == 0 {
		return res, fmt.Errorf("verify: %w: the log has chains but no chain key was given", store.ErrInvalid)
	}
	macs := make([]hash.Hash, len(keys))
	for i, k := range keys {
		macs[i] = hmac.New(sha256.New, k)
	}
	known := make(map[string]store.ChainHead, len(heads))
	var firstChained time.Time
	for _, h := range heads {
		known[h.ChainID] = h
		res.Chains++
		prev, want := h.BaseHash, h.BaseSeq+1
		broken := false
		report := func(r store.AuditRecord, seq int64, problem string) {
			if !broken && (since.IsZero() || !r.Time.Before(since)) {
				res.Breaks = append(res.Breaks, Break{ChainID: h.ChainID, Seq: seq, RecordID: r.ID, Problem: problem})
			}
			broken = true
		}
		k := -1
		if h.BaseSeq > 0 {
			if k = chainKey(keys, h, nil, ""); k < 0 {
				report(store.AuditRecord{Time: h.UpdatedAt}, h.BaseSeq, "the prune checkpoint does not verify under any chain key: it was moved behind the gateway's back")
				k = 0
			}
		}
		err := st.ScanAudit(ctx, store.AuditFilter{ChainID: h.ChainID}, func(r store.AuditRecord) error {
			if r.Chain.Seq <= h.BaseSeq {
				res.Pending++
				return nil
			}
			res.Records++
			if firstChained.IsZero() || r.Time.Before(firstChained) {
				firstChained = r.Time
			}
			if k < 0 {
				if k = chainKey(keys, h, &r, prev); k < 0 {
					k = 0 // no key verifies it: reported below under the current one
				}
			}
			switch {
			case r.Chain.Seq != want:
				report(r, want, fmt.Sprintf("expected seq %d, found %d: a record was deleted or inserted out of order", want, r.Chain.Seq))
			case linkHash(macs[k], prev, r) != r.Chain.Hash:
				report(r, r.Chain.Seq, "hash mismatch: the record was altered (or its predecessor was)")
			}
			prev, want = r.Chain.Hash, r.Chain.Seq+1
			return nil
		})
		if err != nil {
			return res, err
		}
		switch {
		case want-1 < h.Seq:
			report(store.AuditRecord{Time: h.UpdatedAt}, want, fmt.Sprintf("the chain ends at seq %d but its checkpoint is at %d: records at its end were deleted", want-1, h.Seq))
		case prev != h.Hash && want-1 == h.Seq:
			report(store.AuditRecord{Time: h.UpdatedAt}, h.Seq, "the last record does not match the checkpointed head")
		}
	}
	err = st.ScanAudit(ctx, store.AuditFilter{Since: since}, func(r store.AuditRecord) error {
		switch {
		case r.Chain.ChainID == "" && (firstChained.IsZero() || r.Time.Before(firstChained)):
			res.Legacy++
		case r.Chain.ChainID == "":
			res.Breaks = append(res.Breaks, Break{RecordID: r.ID, Problem: "an unchained record among chained ones: inserted behind the gateway's back"})
		case known[r.Chain.ChainID].ChainID == "":
			res.Breaks = append(res.Breaks, Break{ChainID: r.Chain.ChainID, Seq: r.Chain.Seq, RecordID: r.ID, Problem: "a record of a chain with no checkpoint: inserted behind the gateway's back"})
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.Verified = len(res.Breaks) == 0
	return res, nil
}
