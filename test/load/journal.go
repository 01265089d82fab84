package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/xemahq/xema/internal/audit"
)

// The audited floor is the bare proxy keeping the funnel's audit guarantee at its physical
// cost, without the gateway's audit log or any database: per call a decision record made
// durable before the call goes on and an outcome record made durable before the answer, in an
// append-only file, each HMAC-chained to the one before, group-committed (the records that
// arrive while one fdatasync runs are written and synced together by the next). It is the
// ceiling a funnel writing the same two durable records a call can reach on this machine;
// the funnel's distance to it is what its audit path and its other steps cost above that.

// journal is the floor's group-committed, chained, append-only file.
type journal struct {
	f   *os.File
	mac hash.Hash
	// head is the last record's link hash (hex), owned by the writer.
	head []byte

	mu      sync.Mutex
	queue   []*entry
	writing bool
	// Owned by the running writer, reused across batches.
	batch []*entry
	buf   []byte
}

// entry is one record waiting for its batch's fdatasync.
type entry struct {
	rec  []byte
	done chan error
}

var entries = sync.Pool{New: func() any { return &entry{done: make(chan error, 1)} }}

func openJournal(path string, key []byte) (*journal, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	return &journal{f: f, mac: hmac.New(sha256.New, key), head: make([]byte, 0, 2*sha256.Size)}, nil
}

// append writes rec and returns once it is durable (its batch's fdatasync returned).
func (j *journal) append(rec []byte) error {
	e := entries.Get().(*entry)
	e.rec = rec
	j.mu.Lock()
	j.queue = append(j.queue, e)
	if !j.writing {
		j.writing = true
		go j.write()
	}
	j.mu.Unlock()
	err := <-e.done
	e.rec = nil
	entries.Put(e)
	return err
}

// write commits batches until the queue is empty: chain and encode each record, one write,
// one fdatasync, then answer every caller of the batch.
func (j *journal) write() {
	for {
		j.mu.Lock()
		if len(j.queue) == 0 {
			j.writing = false
			j.mu.Unlock()
			return
		}
		j.batch, j.queue = j.queue, j.batch[:0]
		j.mu.Unlock()
		b := j.buf[:0]
		for _, e := range j.batch {
			// A line: the record, then HMAC(key, previous link ‖ record) in hex.
			j.mac.Reset()
			j.mac.Write(j.head)
			j.mac.Write(e.rec)
			var sum [sha256.Size]byte
			j.head = hex.AppendEncode(j.head[:0], j.mac.Sum(sum[:0]))
			b = append(b, e.rec...)
			b = append(b, '\t')
			b = append(b, j.head...)
			b = append(b, '\n')
		}
		_, err := j.f.Write(b)
		if err == nil {
			err = syscall.Fdatasync(int(j.f.Fd()))
		}
		j.buf = b
		for i, e := range j.batch {
			j.batch[i] = nil
			e.done <- err
		}
	}
}

// decisionRecord encodes the decision record of one call, of the funnel's fields and sizes:
// the columns the gateway stores for its decision record, and the policy input.
func decisionRecord(id, inputHash string, now time.Time) []byte {
	b := make([]byte, 0, 768)
	b = append(b, `{"id":"`...)
	b = append(b, id...)
	b = append(b, `","time":`...)
	b = strconv.AppendInt(b, now.UnixMicro(), 10)
	b = append(b, `,"org":"default","ref":"`+noopRef+`","subjectKind":"agent","subjectRef":"agent:support-bot","environment":"project","decision":"allowed","outcome":"admitted","bundleRevision":"load","inputHash":"`...)
	b = append(b, inputHash...)
	b = append(b, `","reasons":[],"suggestions":[],"obligations":[{"kind":"quota","requests":1000000000,"per":"24h"},{"kind":"rate-limit","requests":100000,"per":"1s"}],"policyInput":`...)
	b = append(b, proxyInput...)
	return append(b, '}')
}

// outcomeRecord encodes the outcome record closing decision id: what the decision record
// does not say.
func outcomeRecord(id string, status int, latency time.Duration, now time.Time) []byte {
	b := make([]byte, 0, 160)
	b = append(b, `{"id":"`...)
	b = append(b, audit.OutcomeID(id)...)
	b = append(b, `","parent":"`...)
	b = append(b, id...)
	b = append(b, `","time":`...)
	b = strconv.AppendInt(b, now.UnixMicro(), 10)
	b = append(b, `,"outcome":"ok","runner":"http","status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"latencyMicros":`...)
	b = strconv.AppendInt(b, latency.Microseconds(), 10)
	return append(b, '}')
}
