package audit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"slices"
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

// NewChain starts a chain with a fresh id under key, unregistered: StartChain registers
// the chain a gateway writes.
func NewChain(key []byte) *Chain {
	return &Chain{id: NewID("ch_"), key: key, mac: hmac.New(sha256.New, key)}
}

// Registry is the store as StartChain registers a chain (store.Store).
type Registry interface {
	ChainRegistrations(ctx context.Context) ([]store.ChainRegistration, error)
	RegisterChain(ctx context.Context, reg store.ChainRegistration, head store.ChainHead) error
	ScanAudit(ctx context.Context, f store.AuditFilter, fn func(store.AuditRecord) error) error
}

// registerTries bounds StartChain's attempts when replicas starting together take the same
// registration number.
const registerTries = 20

// StartChain starts a chain under key and registers it (store.ChainRegistration), anchored
// in the registration before it, with its empty head authenticated: from then on its
// disappearance, whole or from its end, is a break. The first registration of a store also
// seals how many unchained records it held.
func StartChain(ctx context.Context, st Registry, key []byte) (*Chain, error) {
	c := NewChain(key)
	for range registerTries {
		regs, err := st.ChainRegistrations(ctx)
		if err != nil {
			return nil, fmt.Errorf("register audit chain: %w", err)
		}
		reg := store.ChainRegistration{No: 1, ChainID: c.id, RegisteredAt: store.Stamp(time.Time{})}
		if len(regs) > 0 {
			last := regs[len(regs)-1]
			reg.No, reg.Anchor = last.No+1, last.MAC
		} else if err := st.ScanAudit(ctx, store.AuditFilter{Unchained: true}, func(store.AuditRecord) error {
			reg.Legacy++
			return nil
		}); err != nil {
			return nil, fmt.Errorf("register audit chain: count the unchained records: %w", err)
		}
		reg.MAC = RegistrationMAC(key, reg)
		head := store.ChainHead{ChainID: c.id, MAC: HeadMAC(key, c.id, 0, "")}
		err = st.RegisterChain(ctx, reg, head)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return nil, fmt.Errorf("register audit chain: %w", err)
		}
	}
	return nil, fmt.Errorf("register audit chain: %w: %d replicas took the same registration number in turn", store.ErrConflict, registerTries)
}

// HeadMAC authenticates a chain's checkpointed head (seq, hash) under the chain's key: a head
// set back by anyone without the key does not verify.
func HeadMAC(key []byte, chainID string, seq int64, hash string) string {
	return headMAC(hmac.New(sha256.New, key), chainID, seq, hash)
}

// headMAC is HeadMAC with mac, an HMAC-SHA256 under the chain's key, reset first: the writer
// seals one a batch with the chain's own, allocating nothing but the result.
func headMAC(mac hash.Hash, chainID string, seq int64, head string) string {
	bp := linkBufs.Get().(*[]byte)
	var digits [20]byte
	n := strconv.AppendInt(digits[:0], seq, 10)
	b := appendPart((*bp)[:0], "xema-chain-head")
	b = appendPart(b, chainID)
	b = strconv.AppendInt(b, int64(len(n)), 10)
	b = append(append(b, ':'), n...)
	b = appendPart(b, head)
	mac.Reset()
	mac.Write(b)
	*bp = b
	linkBufs.Put(bp)
	var sum [sha256.Size]byte
	out := make([]byte, 0, len("hmac-sha256:")+2*sha256.Size)
	out = append(out, "hmac-sha256:"...)
	return string(hex.AppendEncode(out, mac.Sum(sum[:0])))
}

// appendPart appends p length-prefixed ("len:p"), as keyedMAC encodes each part.
func appendPart(b []byte, p string) []byte {
	b = strconv.AppendInt(b, int64(len(p)), 10)
	b = append(b, ':')
	return append(b, p...)
}

// RegistrationMAC authenticates a chain's registration under the chain's key.
func RegistrationMAC(key []byte, r store.ChainRegistration) string {
	return keyedMAC(key, "xema-chain-registration", strconv.FormatInt(r.No, 10), r.ChainID,
		store.Stamp(r.RegisteredAt).Format(time.RFC3339Nano), strconv.FormatInt(r.Legacy, 10), r.Anchor)
}

// keyedMAC is an HMAC-SHA256 under key of parts, each length-prefixed so no two lists encode alike.
func keyedMAC(key []byte, parts ...string) string {
	mac := hmac.New(sha256.New, key)
	var b []byte
	for _, p := range parts {
		b = appendPart(b, p)
	}
	mac.Write(b)
	return "hmac-sha256:" + hex.EncodeToString(mac.Sum(nil))
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
	if len(rs) > 0 {
		rs[len(rs)-1].Chain.HeadMAC = headMAC(c.mac, c.id, c.seq, c.head)
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
	switch {
	case b.ChainID == "" && b.RecordID == "":
		return b.Problem
	case b.ChainID == "":
		return fmt.Sprintf("record %s: %s", b.RecordID, b.Problem)
	case b.Seq == 0 && b.RecordID == "":
		return fmt.Sprintf("chain %s: %s", b.ChainID, b.Problem)
	}
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
	// Registered counts the chains of the registry; PreRegistry the chains written before
	// it existed, whose heads are not authenticated: a cut at their end goes unnoticed.
	Registered, PreRegistry int
	// Pending counts records at or below their chain's prune checkpoint not deleted yet (a
	// prune under way, or one interrupted): they are beyond the verified range.
	Pending int
	// Pruned is the last prune's boundary (zero when the log was never pruned): each chain
	// is verified from its checkpoint on.
	Pruned store.PruneBoundary
	// Newest is the newest record of a registered chain that verified to its authenticated
	// head: the last record the log vouches for. Whoever can write the database can still set
	// the whole log back to an earlier state of itself (as restoring an old backup does), so
	// compare it with what you know was written (the decision log's export, a SIEM).
	Newest   store.AuditRecord
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
	ChainRegistrations(ctx context.Context) ([]store.ChainRegistration, error)
	PruneBoundary(ctx context.Context) (store.PruneBoundary, error)
	ScanAudit(ctx context.Context, f store.AuditFilter, fn func(store.AuditRecord) error) error
}

// registered is a registration that verified, with the index of its chain's key.
type registered struct {
	store.ChainRegistration
	key int
}

// verifyRegistry walks the registrations in order: each must verify under a chain key and be
// anchored in the one before, their numbers without a gap from 1. It returns the verified
// ones by chain id and the breaks found.
func verifyRegistry(regs []store.ChainRegistration, keys [][]byte) (map[string]registered, []Break) {
	out := make(map[string]registered, len(regs))
	var breaks []Break
	prev, prevNo := "", int64(0)
	for _, r := range regs {
		if r.No != prevNo+1 {
			breaks = append(breaks, Break{ChainID: r.ChainID, Problem: fmt.Sprintf(
				"chain registrations %d to %d are missing: the chains they registered were deleted", prevNo+1, r.No-1)})
			prev = r.Anchor // reported once: the registrations after it are judged from here
		}
		prevNo = r.No
		k := slices.IndexFunc(keys, func(key []byte) bool { return hmac.Equal([]byte(RegistrationMAC(key, r)), []byte(r.MAC)) })
		switch {
		case k < 0:
			breaks = append(breaks, Break{ChainID: r.ChainID, Problem: fmt.Sprintf(
				"chain registration %d does not verify under any chain key: inserted or altered behind the gateway's back", r.No)})
		case r.Anchor != prev:
			breaks = append(breaks, Break{ChainID: r.ChainID, Problem: fmt.Sprintf(
				"chain registration %d is not anchored in registration %d: one of them was replaced behind the gateway's back", r.No, r.No-1)})
		default:
			out[r.ChainID] = registered{r, k}
		}
		prev = r.MAC
	}
	return out, breaks
}

// Verify re-derives every chain of the store from its records and checks it against the
// checkpointed heads and the chain registry: an altered record, a deleted one (a gap, or a
// tail shorter than its authenticated head), a whole chain deleted (its registration left
// behind, or a gap in the registrations), one inserted out of order or behind the gateway's
// back (unchained after chaining began, beyond the unchained records the registry sealed, or
// of an unknown chain) is a Break; the first of each chain is reported, in chain order. keys
// are the chain keys, current first: each chain is verified under the one it was written
// with, so chains written before a key rotation still verify. A pruned chain is verified
// from its checkpoint (whose MAC must verify) on: a prune is no break, a deletion above the
// checkpoint is one. Only breaks at records from since on are reported (zero: all). It
// only reads.
func Verify(ctx context.Context, st Verifier, keys [][]byte, since time.Time) (VerifyResult, error) {
	var res VerifyResult
	heads, err := st.ChainHeads(ctx)
	if err != nil {
		return res, err
	}
	regs, err := st.ChainRegistrations(ctx)
	if err != nil {
		return res, err
	}
	if res.Pruned, err = st.PruneBoundary(ctx); err != nil {
		return res, err
	}
	if (len(heads) > 0 || len(regs) > 0) && len(keys) == 0 {
		return res, fmt.Errorf("verify: %w: the log has chains but no chain key was given", store.ErrInvalid)
	}
	regOf, regBreaks := verifyRegistry(regs, keys)
	res.Breaks = append(res.Breaks, regBreaks...)
	res.Registered = len(regs)
	var registryBegan time.Time
	if len(regs) > 0 {
		registryBegan = regs[0].RegisteredAt
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
		reg, isRegistered := regOf[h.ChainID]
		prev, want := h.BaseHash, h.BaseSeq+1
		broken := false
		report := func(r store.AuditRecord, seq int64, problem string) {
			if !broken && (since.IsZero() || !r.Time.Before(since)) {
				res.Breaks = append(res.Breaks, Break{ChainID: h.ChainID, Seq: seq, RecordID: r.ID, Problem: problem})
			}
			broken = true
		}
		k := -1
		switch {
		case isRegistered:
			k = reg.key
			if !hmac.Equal([]byte(HeadMAC(keys[k], h.ChainID, h.Seq, h.Hash)), []byte(h.MAC)) {
				report(store.AuditRecord{Time: h.UpdatedAt}, h.Seq, "the chain's head does not verify under its key: it was moved behind the gateway's back (records at its end deleted and the head set back)")
			}
		case h.MAC != "":
			report(store.AuditRecord{Time: h.UpdatedAt}, h.Seq, "an authenticated chain head with no registration: its registration was deleted or the chain inserted behind the gateway's back")
		default:
			res.PreRegistry++
		}
		if h.BaseSeq > 0 {
			if kb := chainKey(keys, h, nil, ""); kb < 0 || (k >= 0 && kb != k) {
				report(store.AuditRecord{Time: h.UpdatedAt}, h.BaseSeq, "the prune checkpoint does not verify under the chain's key: it was moved behind the gateway's back")
			} else {
				k = kb
			}
		}
		var newest store.AuditRecord
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
			case !isRegistered && !registryBegan.IsZero() && !r.Time.Before(registryBegan):
				report(r, r.Chain.Seq, "a chain outside the registry holds records written after the registry began: its registration was deleted")
			}
			if r.Time.After(newest.Time) {
				newest = r
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
		if isRegistered && !broken && newest.Time.After(res.Newest.Time) {
			res.Newest = newest
		}
	}
	for _, r := range regs {
		if _, ok := known[r.ChainID]; !ok {
			res.Breaks = append(res.Breaks, Break{ChainID: r.ChainID, Problem: fmt.Sprintf(
				"chain registered %d at %s has disappeared: its head and records were deleted", r.No, r.RegisteredAt.UTC().Format(time.RFC3339))})
		}
	}
	sealedLegacy := int64(-1) // no registry: unchained records older than every chain are legacy
	if len(regs) > 0 && regs[0].No == 1 {
		if _, ok := regOf[regs[0].ChainID]; ok {
			sealedLegacy = regs[0].Legacy
		}
	}
	err = st.ScanAudit(ctx, store.AuditFilter{Since: since}, func(r store.AuditRecord) error {
		switch {
		case r.Chain.ChainID == "" && (firstChained.IsZero() || r.Time.Before(firstChained)) && (registryBegan.IsZero() || r.Time.Before(registryBegan)):
			res.Legacy++
		case r.Chain.ChainID == "":
			res.Breaks = append(res.Breaks, Break{RecordID: r.ID, Problem: "an unchained record written after chaining began: inserted behind the gateway's back"})
		case known[r.Chain.ChainID].ChainID == "":
			res.Breaks = append(res.Breaks, Break{ChainID: r.Chain.ChainID, Seq: r.Chain.Seq, RecordID: r.ID, Problem: "a record of a chain with no checkpoint: inserted behind the gateway's back"})
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	// The count the registry sealed covers the whole log, whatever since says: counted
	// through the unchained records' own index, never a second scan of the chained ones.
	var unchained int64
	if sealedLegacy >= 0 {
		if err := st.ScanAudit(ctx, store.AuditFilter{Unchained: true}, func(store.AuditRecord) error {
			unchained++
			return nil
		}); err != nil {
			return res, err
		}
	}
	if sealedLegacy >= 0 && unchained > sealedLegacy {
		res.Breaks = append(res.Breaks, Break{Problem: fmt.Sprintf(
			"%d unchained record(s) where the chain registry sealed %d when chaining began: unchained records were inserted behind the gateway's back", unchained, sealedLegacy)})
	}
	res.Verified = len(res.Breaks) == 0
	return res, nil
}
