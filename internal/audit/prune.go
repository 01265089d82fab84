package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// DefaultPruneBatch is how many records one delete of a prune removes: small enough that an
// append waiting behind it waits a few milliseconds (BenchmarkAppendDuringPrune).
const DefaultPruneBatch = 250

// PruneOptions are what Prune takes.
type PruneOptions struct {
	// Before: records older than it are removed (in each chain, every record up to the
	// highest seq older than it, so a chain stays contiguous).
	Before time.Time
	// Archive, when set, receives the archive of the removed records; it is synced before
	// anything is removed.
	Archive interface {
		io.Writer
		Sync() error
	}
	// Batch is how many records one delete removes (0: DefaultPruneBatch).
	Batch int
	// Now stamps the checkpoint (zero: time.Now).
	Now time.Time
}

// PruneResult is what Prune did.
type PruneResult struct {
	Chains   int   // chains whose checkpoint moved
	Archived int64 // records written to the archive
	Deleted  int64
}

// errStop ends a scan early.
var errStop = errors.New("stop")

// Pruner is the store as Prune verifies, archives and removes the log's oldest records
// (store.Store).
type Pruner interface {
	LastLinksBefore(ctx context.Context, before time.Time) ([]store.ChainLink, error)
	ChainHeads(ctx context.Context) ([]store.ChainHead, error)
	ScanAudit(ctx context.Context, f store.AuditFilter, fn func(store.AuditRecord) error) error
	CheckpointPrune(ctx context.Context, b store.PruneBoundary, bases []store.ChainHead) error
	DeletePrunedAudit(ctx context.Context, limit int) (int64, error)
}

// Prune removes the records older than opt.Before. It first verifies each chain's segment
// to be removed (a segment that does not verify is refused: pruning must not erase the
// evidence of tampering) and writes it to the archive, then checkpoints each chain's last
// removed link with its MAC under the chain's key, then deletes beneath the checkpoints in
// batches of opt.Batch, each its own transaction, so appends go on meanwhile. A prune cut
// short (a crash, ctx) leaves records beneath a checkpoint, which the next prune deletes and
// verification skips. keys are the chain keys, current first.
func Prune(ctx context.Context, st Pruner, keys [][]byte, opt PruneOptions) (PruneResult, error) {
	var res PruneResult
	if opt.Before.IsZero() {
		return res, fmt.Errorf("prune: %w: no boundary", store.ErrInvalid)
	}
	if opt.Batch <= 0 {
		opt.Batch = DefaultPruneBatch
	}
	if opt.Now.IsZero() {
		opt.Now = time.Now()
	}
	links, err := st.LastLinksBefore(ctx, opt.Before)
	if err != nil {
		return res, err
	}
	heads, err := st.ChainHeads(ctx)
	if err != nil {
		return res, err
	}
	if len(heads) > 0 && len(keys) == 0 {
		return res, fmt.Errorf("prune: %w: the log has chains but no chain key was given", store.ErrInvalid)
	}
	byID := make(map[string]store.ChainHead, len(heads))
	for _, h := range heads {
		byID[h.ChainID] = h
	}
	type segment struct {
		head store.ChainHead
		to   store.ChainLink
		key  []byte
	}
	var segs []segment
	m := ArchiveManifest{Before: store.Stamp(opt.Before), CreatedAt: store.Stamp(opt.Now)}
	for _, l := range links {
		h, ok := byID[l.ChainID]
		if !ok {
			return res, fmt.Errorf("prune: chain %s has records but no checkpoint: run xema audit verify", l.ChainID)
		}
		if l.Seq <= h.BaseSeq {
			continue // pruned already (its records may still await deletion)
		}
		segs = append(segs, segment{head: h, to: l})
	}
	// Verify each segment and learn its key (one pass, before anything is written).
	for i := range segs {
		s := &segs[i]
		k, err := verifySegment(ctx, st, keys, s.head, s.to, nil)
		if err != nil {
			return res, err
		}
		s.key = keys[k]
		m.Chains = append(m.Chains, ArchiveSegment{ChainID: s.head.ChainID, FromSeq: s.head.BaseSeq + 1, FromHash: s.head.BaseHash,
			FromMAC: s.head.BaseMAC, ToSeq: s.to.Seq, ToHash: s.to.Hash, ToMAC: BaseMAC(s.key, s.head.ChainID, s.to.Seq, s.to.Hash)})
	}
	if opt.Archive != nil {
		var akey []byte
		if len(keys) > 0 {
			akey = keys[0]
		}
		aw, err := newArchiveWriter(opt.Archive, akey, m)
		if err != nil {
			return res, err
		}
		for _, s := range segs {
			if _, err := verifySegment(ctx, st, keys, s.head, s.to, aw.add); err != nil {
				return res, err
			}
		}
		err = st.ScanAudit(ctx, store.AuditFilter{Until: opt.Before, Unchained: true}, aw.add)
		if err != nil {
			return res, err
		}
		if err := aw.close(); err != nil {
			return res, err
		}
		if err := opt.Archive.Sync(); err != nil {
			return res, fmt.Errorf("archive: %w", err)
		}
		res.Archived = aw.end.Records
	}
	bases := make([]store.ChainHead, 0, len(segs))
	for i, s := range segs {
		bases = append(bases, store.ChainHead{ChainID: s.head.ChainID, BaseSeq: s.to.Seq, BaseHash: s.to.Hash, BaseMAC: m.Chains[i].ToMAC})
	}
	if err := st.CheckpointPrune(ctx, store.PruneBoundary{Before: opt.Before, PrunedAt: opt.Now}, bases); err != nil {
		return res, err
	}
	res.Chains = len(bases)
	for {
		n, err := st.DeletePrunedAudit(ctx, opt.Batch)
		res.Deleted += n
		if err != nil {
			return res, err
		}
		if n == 0 {
			return res, nil
		}
	}
}

// scanner is the store as verifySegment reads one chain (store.Store).
type scanner interface {
	ScanAudit(ctx context.Context, f store.AuditFilter, fn func(store.AuditRecord) error) error
}

// verifySegment checks the records of h's chain after its checkpoint up to to, under the key
// they were written with (its index in keys is returned), passing each to emit when set. A
// gap or a mismatch is an error naming the break.
func verifySegment(ctx context.Context, st scanner, keys [][]byte, h store.ChainHead, to store.ChainLink,
	emit func(store.AuditRecord) error) (int, error) {
	prev, want, k := h.BaseHash, h.BaseSeq+1, -1
	if h.BaseSeq > 0 {
		if k = chainKey(keys, h, nil, ""); k < 0 {
			return 0, fmt.Errorf("prune refused: %w", Break{ChainID: h.ChainID, Seq: h.BaseSeq, Problem: "its prune checkpoint does not verify under any chain key"})
		}
	}
	err := st.ScanAudit(ctx, store.AuditFilter{ChainID: h.ChainID}, func(r store.AuditRecord) error {
		if r.Chain.Seq <= h.BaseSeq {
			return nil
		}
		if r.Chain.Seq > to.Seq {
			return errStop
		}
		if k < 0 {
			if k = chainKey(keys, h, &r, prev); k < 0 {
				return Break{ChainID: h.ChainID, Seq: r.Chain.Seq, RecordID: r.ID, Problem: "no chain key verifies its first record"}
			}
		}
		switch {
		case r.Chain.Seq != want:
			return Break{ChainID: h.ChainID, Seq: want, RecordID: r.ID, Problem: fmt.Sprintf("expected seq %d, found %d", want, r.Chain.Seq)}
		case LinkHash(keys[k], prev, r) != r.Chain.Hash:
			return Break{ChainID: h.ChainID, Seq: r.Chain.Seq, RecordID: r.ID, Problem: "hash mismatch: the record was altered"}
		}
		prev, want = r.Chain.Hash, r.Chain.Seq+1
		if emit != nil {
			return emit(r)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		var b Break
		if errors.As(err, &b) {
			return 0, fmt.Errorf("prune refused: the records to remove do not verify (%w): run xema audit verify", b)
		}
		return 0, err
	}
	if want-1 != to.Seq || prev != to.Hash {
		return 0, fmt.Errorf("prune refused: %w", Break{ChainID: h.ChainID, Seq: want, Problem: "the records to remove end before the boundary's link"})
	}
	return k, nil
}
