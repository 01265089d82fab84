package audit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/telemetry"
)

// DefaultMaxBatch bounds the records one commit carries when Log.MaxBatch is 0.
const DefaultMaxBatch = 64

// writeTimeout bounds one batch's transaction: the batch serves many callers, so no caller's
// context governs it.
const writeTimeout = 15 * time.Second

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("audit log closed")

// Log appends to the store's audit log with group commit: concurrent appends wait in a queue,
// and one writer at a time takes what is waiting (at most MaxBatch records) into one
// transaction, so N callers pay one commit, one fsync, instead of N. The zero value with a
// Store is ready; Close flushes it.
type Log struct {
	Store Writer
	// MaxBatch bounds the records of one transaction; 0 means DefaultMaxBatch.
	MaxBatch int
	// MaxWait is how long the writer lingers for more records before committing a batch
	// smaller than MaxBatch; 0 commits as soon as the writer is free, which under load
	// batches by itself (records arriving during one commit form the next batch).
	MaxWait time.Duration
	// Chain, when set, links every record into its hash chain as its batch is written.
	Chain *Chain
	// Committed, when set, is handed each batch once it has committed (the decision log
	// export); it must not block or keep the slice.
	Committed func([]store.AuditRecord)
	// Usage, when set, has its unsaved counters written in each batch's transaction
	// (ratelimit.Memory, the embedded store's rate counters). They are taken after the
	// batch's records were queued, so a call counted before its record was appended has its
	// count committed with its record, or before.
	Usage UsageJournal

	mu      sync.Mutex
	queue   []*waiter
	writing bool          // a writer goroutine runs; it exits when it finds the queue empty
	closed  bool          // Append refuses new records
	wake    chan struct{} // ends a writer's linger: the queue reached MaxBatch, or Close
	writers sync.WaitGroup

	// Owned by the one running writer, kept across writers so batches reuse their memory.
	batch []*waiter
	recs  []store.AuditRecord
}

// Writer is the store as the log writes to it: appends only (store.Store).
type Writer interface {
	// AppendAuditsWithUsage commits a batch of records, and the usage counters with them, in
	// one transaction.
	AppendAuditsWithUsage(ctx context.Context, rs []store.AuditRecord, usage []store.UsageCount) error
}

// UsageJournal is a set of counters written with the audit batches.
type UsageJournal interface {
	// Unsaved returns the counters changed since the last call.
	Unsaved() []store.UsageCount
	// Saved reports the write of what Unsaved returned; on an error they are unsaved again.
	Saved(counts []store.UsageCount, err error)
}

// waiter is one Append waiting for its record's batch to commit.
type waiter struct {
	rec  store.AuditRecord
	done chan error // buffered: the writer never blocks on a caller that left
}

// waiters recycles the waiters whose answer was received; one whose caller left is not
// reused, as the writer may still answer it.
var waiters = sync.Pool{New: func() any { return &waiter{done: make(chan error, 1)} }}

// Append writes r durably and returns once its transaction has committed: the caller may
// then answer with r.ID, and a crash after Append returns loses nothing. A record the store
// would refuse fails only its own caller, before it joins a batch; a store error fails every
// record of that batch. When ctx ends first Append returns ctx's error, and the record,
// already queued, may still be written: no other caller's record is dropped.
func (l *Log) Append(ctx context.Context, r store.AuditRecord) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("audit %s: %w", r.ID, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("audit %s: %w", r.ID, err)
	}
	w := waiters.Get().(*waiter)
	w.rec = r
	if err := l.enqueue(w); err != nil {
		w.rec = store.AuditRecord{}
		waiters.Put(w)
		return fmt.Errorf("audit %s: %w", r.ID, err)
	}
	select {
	case err := <-w.done:
		w.rec = store.AuditRecord{}
		waiters.Put(w)
		if err != nil {
			return fmt.Errorf("audit %s: %w", r.ID, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("audit %s: not known to be written: %w", r.ID, ctx.Err())
	}
}

// Close waits until every queued record is committed (each caller gets its answer) and makes
// later Appends fail with ErrClosed. It does not close the store.
func (l *Log) Close() {
	l.mu.Lock()
	l.closed = true
	l.signal()
	l.mu.Unlock()
	l.writers.Wait()
}

func (l *Log) maxBatch() int {
	if l.MaxBatch > 0 {
		return l.MaxBatch
	}
	return DefaultMaxBatch
}

// enqueue queues w and starts the writer if none runs.
func (l *Log) enqueue(w *waiter) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	l.queue = append(l.queue, w)
	if !l.writing {
		l.writing = true
		l.writers.Add(1)
		go l.write()
	} else if len(l.queue) >= l.maxBatch() {
		l.signal()
	}
	return nil
}

// signal ends the writer's linger, if one lingers; l.mu is held.
func (l *Log) signal() {
	if l.wake == nil {
		return
	}
	select {
	case l.wake <- struct{}{}:
	default: // already signalled
	}
}

// write commits batches until the queue is empty, then exits.
func (l *Log) write() {
	defer l.writers.Done()
	for {
		batch := l.take(l.batch[:0])
		if len(batch) == 0 {
			return // the buffers stay on l for the next writer
		}
		recs := l.recs[:0]
		for _, w := range batch {
			recs = append(recs, w.rec)
		}
		var undoSeq int64
		var undoHead string
		if l.Chain != nil {
			undoSeq, undoHead = l.Chain.seal(recs)
		}
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		began := time.Now()
		var usage []store.UsageCount
		if l.Usage != nil {
			usage = l.Usage.Unsaved()
		}
		err := l.Store.AppendAuditsWithUsage(ctx, recs, usage)
		if l.Usage != nil {
			l.Usage.Saved(usage, err)
		}
		telemetry.AuditBatch(len(recs), time.Since(began).Seconds(), err)
		cancel()
		if err != nil && l.Chain != nil {
			l.Chain.undo(undoSeq, undoHead)
		}
		if err == nil && l.Committed != nil {
			l.Committed(recs)
		}
		clear(recs) // records hold the callers' documents: keep none past the batch
		for i, w := range batch {
			batch[i] = nil // w goes back to its caller, maybe to the pool
			w.done <- err
		}
		l.batch, l.recs = batch, recs
	}
}

// take moves up to MaxBatch waiting records into batch, lingering MaxWait first when fewer
// are waiting. An empty result means the queue was empty and the writer must exit: writing
// is cleared under the same lock, so the next enqueue starts a new writer.
func (l *Log) take(batch []*waiter) []*waiter {
	limit := l.maxBatch()
	l.mu.Lock()
	if l.MaxWait > 0 && len(l.queue) > 0 && len(l.queue) < limit && !l.closed {
		if l.wake == nil {
			l.wake = make(chan struct{}, 1)
		}
		wake := l.wake
		l.mu.Unlock()
		linger(wake, l.MaxWait)
		l.mu.Lock()
	}
	n := min(len(l.queue), limit)
	if n == 0 {
		l.writing = false
		l.mu.Unlock()
		return batch
	}
	batch = append(batch, l.queue[:n]...)
	rest := copy(l.queue, l.queue[n:])
	clear(l.queue[rest:])
	l.queue = l.queue[:rest]
	l.mu.Unlock()
	return batch
}

// linger waits d, or less if woken meanwhile.
func linger(wake <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wake:
	}
}
