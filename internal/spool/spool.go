// Package spool keeps the writes that record how a call ended (its audit outcome record, the
// end of an approval, the stored outcome of an idempotency key) when the store cannot take
// them, and writes them as soon as it can. A call that ran must never be left without its
// outcome: the entry is fsynced to a file under the data dir before the caller is answered,
// so a crash while the store is down loses nothing either.
//
// The file is preallocated (zeros) when the spool opens, so appending an entry overwrites
// blocks the file already owns: a full disk, the usual reason the store cannot write, does
// not stop the spool. Entries are JSON lines; the first NUL byte ends them. Re-applying an
// entry is harmless (an audit record already stored, an approval already moved, a key
// already completed count as written), so the file is only cleared once every entry is in.
package spool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// FileName is the spool file under the data dir.
const FileName = "outcome-spool.jsonl"

// DefaultSize is the space preallocated for entries.
const DefaultSize = 4 << 20

// RetryEvery is how often a non-empty spool retries the store.
const RetryEvery = time.Second

// Entry is one deferred write; exactly one field is set.
type Entry struct {
	Audit       *store.AuditRecord           `json:"audit,omitempty"`
	Approval    *store.ApprovalTransition    `json:"approval,omitempty"`
	Idempotency *store.IdempotencyCompletion `json:"idempotency,omitempty"`
}

// Store is what a drain writes to: the audit log, approval ends and idempotency answers
// (store.Store).
type Store interface {
	GetAudit(ctx context.Context, id string) (store.AuditRecord, error)
	AppendAudit(ctx context.Context, r store.AuditRecord) error
	TransitionApproval(ctx context.Context, t store.ApprovalTransition) (store.Approval, error)
	CompleteIdempotency(ctx context.Context, c store.IdempotencyCompletion) error
}

// Spool is safe for concurrent use. A nil *Spool keeps nothing (Add reports false).
type Spool struct {
	store   Store
	path    string
	size    int64
	mu      sync.Mutex
	f       *os.File
	off     int64 // end of the entries written to f
	pending []Entry
	drainMu sync.Mutex // one drain at a time
	kick    chan struct{}

	// AppendAudit writes a spooled audit record; set it to the gateway's audit log so the
	// record joins its hash chain. nil writes to the store directly (unchained).
	AppendAudit func(ctx context.Context, r store.AuditRecord) error
}

// Open opens (or creates) dir/FileName, loads the entries a previous process left and
// preallocates the file. Call Run to drain it.
func Open(dir string, st Store) (*Spool, error) {
	s := &Spool{store: st, path: filepath.Join(dir, FileName), size: DefaultSize, kick: make(chan struct{}, 1)}
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("outcome spool: %w", err)
	}
	s.f = f
	// Entries hold call answers and outputs (an idempotency key's stored body, an approval's
	// output): owner-only, also when the file was left wider by someone else.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, fmt.Errorf("outcome spool %s: %w", s.path, err)
	}
	raw, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("outcome spool %s: %w", s.path, err)
	}
	if i := bytes.IndexByte(raw, 0); i >= 0 {
		raw = raw[:i]
	}
	if tail := len(raw) - (bytes.LastIndexByte(raw, '\n') + 1); tail > 0 {
		// A torn last entry (the process died mid-write): zero it, or the next entry would be
		// written onto its end and, unreadable with it, be lost at the next start.
		slog.Warn("outcome spool: dropping a torn entry", "path", s.path, "bytes", tail)
		if _, err := f.WriteAt(make([]byte, tail), int64(len(raw)-tail)); err != nil {
			f.Close()
			return nil, fmt.Errorf("outcome spool %s: %w", s.path, err)
		}
		raw = raw[:len(raw)-tail]
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil {
			slog.Warn("outcome spool: skipping a torn entry", "path", s.path, "err", err)
			continue
		}
		s.pending = append(s.pending, e)
	}
	s.off = int64(len(raw))
	if len(s.pending) > 0 {
		slog.Warn("outcome spool holds writes of a previous run; writing them to the store", "entries", len(s.pending))
	}
	if err := s.preallocate(); err != nil {
		slog.Warn("outcome spool: preallocation failed; entries may not survive a full disk", "path", s.path, "err", err)
	}
	return s, nil
}

// preallocate writes zeros from the end of the entries up to size (real blocks, not a hole).
func (s *Spool) preallocate() error {
	st, err := s.f.Stat()
	if err != nil {
		return err
	}
	if st.Size() >= s.size {
		return nil
	}
	zeros := make([]byte, 64<<10)
	for at := st.Size(); at < s.size; at += int64(len(zeros)) {
		n := min(int64(len(zeros)), s.size-at)
		if _, err := s.f.WriteAt(zeros[:n], at); err != nil {
			return err
		}
	}
	return s.f.Sync()
}

// Add keeps e until the store takes it. durable is true when e is fsynced to the file (it
// survives a crash); false when it is only held in memory.
func (s *Spool) Add(e Entry) (durable bool) {
	if s == nil {
		return false
	}
	line, err := json.Marshal(e)
	if err != nil {
		slog.Error("outcome spool: entry does not encode", "err", err)
		return false
	}
	line = append(line, '\n')
	s.mu.Lock()
	s.pending = append(s.pending, e)
	if _, err = s.f.WriteAt(line, s.off); err == nil {
		err = s.f.Sync()
	}
	if err == nil {
		s.off += int64(len(line))
		durable = true
	} else {
		slog.Error("outcome spool: entry kept in memory only", "path", s.path, "err", err)
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return durable
}

// Len is the number of entries not yet written to the store.
func (s *Spool) Len() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// Run drains the spool whenever an entry is added and every RetryEvery while entries wait,
// until ctx ends.
func (s *Spool) Run(ctx context.Context) {
	t := time.NewTicker(RetryEvery)
	defer t.Stop()
	var failing error
	for {
		if s.Len() > 0 {
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := s.Drain(dctx)
			cancel()
			if err != nil && (failing == nil || err.Error() != failing.Error()) {
				slog.Warn("outcome spool: the store refuses its entries; retrying every second", "entries", s.Len(), "err", err)
			}
			failing = err
		}
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-t.C:
		}
	}
}

// Drain writes the waiting entries in order, stopping at the first the store refuses for a
// reason other than "already there". Once all are written the file is cleared.
func (s *Spool) Drain(ctx context.Context) error {
	if s == nil {
		return nil
	}
	s.drainMu.Lock()
	defer s.drainMu.Unlock()
	s.mu.Lock()
	batch := append([]Entry(nil), s.pending...)
	s.mu.Unlock()
	done := 0
	var err error
	for _, e := range batch {
		if err = s.apply(ctx, e); err != nil {
			break
		}
		done++
	}
	if done == 0 {
		return err
	}
	s.mu.Lock()
	s.pending = s.pending[done:]
	left := len(s.pending)
	if left == 0 && s.off > 0 {
		// Every entry is in the store: clear the file in place (no new blocks needed).
		if _, zerr := s.f.WriteAt(make([]byte, s.off), 0); zerr == nil && s.f.Sync() == nil {
			s.off = 0
		}
	}
	s.mu.Unlock()
	if left == 0 {
		slog.Info("outcome spool drained: every deferred outcome is recorded", "entries", done)
	}
	return err
}

// apply writes one entry; a write already done counts as written.
func (s *Spool) apply(ctx context.Context, e Entry) error {
	var err error
	switch {
	case e.Audit != nil:
		// The write that failed may have committed after all (an ambiguous failure): a record
		// already stored is done, and is never sent twice (a duplicate would fail its batch).
		if _, gerr := s.store.GetAudit(ctx, e.Audit.ID); gerr == nil {
			return nil
		}
		if s.AppendAudit != nil {
			err = s.AppendAudit(ctx, *e.Audit)
		} else {
			err = s.store.AppendAudit(ctx, *e.Audit)
		}
	case e.Approval != nil:
		_, err = s.store.TransitionApproval(ctx, *e.Approval)
	case e.Idempotency != nil:
		err = s.store.CompleteIdempotency(ctx, *e.Idempotency)
	}
	switch {
	case err == nil || errors.Is(err, store.ErrConflict):
		return nil
	case errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid):
		// The store will never take it: dropped, so the entries after it are written, but
		// said (its kind and error only: the entry holds call answers).
		slog.Error("outcome spool: the store refuses an entry for good; dropping it", "entry", e.kind(), "err", err)
		return nil
	}
	return err
}

func (e Entry) kind() string {
	switch {
	case e.Audit != nil:
		return "audit " + e.Audit.ID
	case e.Approval != nil:
		return "approval " + e.Approval.ID
	case e.Idempotency != nil:
		return "idempotency key " + e.Idempotency.Key
	}
	return "empty"
}

// Close makes a last drain attempt bounded by ctx and closes the file; entries still waiting
// stay in it for the next start.
func (s *Spool) Close(ctx context.Context) error {
	if s == nil {
		return nil
	}
	if s.Len() > 0 {
		if err := s.Drain(ctx); err != nil {
			slog.Warn("outcome spool: entries left for the next start", "entries", s.Len(), "err", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Close()
}
