// Package unauth audits the requests refused at authentication (no, expired, forged or foreign
// token) in aggregate, so a flood of them adds a bounded number of audit rows.
package unauth

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/periodic"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/store"
)

// CodeUnauthenticated is the answer code (401) of a request refused at authentication.
const CodeUnauthenticated = "UNAUTHENTICATED"

// Defaults of an Aggregator.
const (
	DefaultInterval   = 10 * time.Second
	DefaultMaxBuckets = 1024
)

// OverflowSource is the source of the one bucket every attempt goes to while the aggregator
// holds its maximum of buckets.
const OverflowSource = "other"

// Aggregator audits unauthenticated attempts in aggregate: one bucket per (route,
// reason, source address) per interval, so a flood adds a bounded number of rows instead of
// one per request, while every attempt is still counted.
//
// A bucket's id is known before the first 401 is answered, and resolves at once: the
// bucket's opening record (count 1, the first attempt) is written synchronously when the
// bucket opens, before any attempt counted into it is answered. When the interval ends (or
// on Close) a closing record, id audit.AggregateCountID(id) and parent the opening record, carries
// the count of the bucket's other attempts; a bucket of one attempt writes no closing
// record. So the audit log is never updated (it is append-only), each bucket costs at most
// two rows per interval, and the counts of all rows sum to the number of attempts.
//
// Crash window: attempts 2..n of a bucket still open when the process dies are lost (at most
// one interval's worth per bucket); its first attempt is always in the log. A graceful
// shutdown (Close) loses nothing.
//
// Memory is bounded: at most MaxBuckets buckets are open; beyond that, attempts of new keys
// are counted into one overflow bucket (route "*", reason "*", source OverflowSource).
type Aggregator struct {
	Audit Appender
	// Revision names the policy revision recorded with each row (may be nil).
	Revision func() string
	// Interval is how long one bucket stays open; 0 means DefaultInterval.
	Interval time.Duration
	// MaxBuckets bounds the open buckets; 0 means DefaultMaxBuckets.
	MaxBuckets int

	mu     sync.Mutex
	open   map[bucketKey]*bucket
	closed bool
}

// Appender commits audit records (audit.Log).
type Appender interface {
	Append(ctx context.Context, rec store.AuditRecord) error
}

type bucketKey struct{ route, reason, source string }

type bucket struct {
	id     string
	key    bucketKey
	opened time.Time
	count  int64         // attempts counted, the first included; under mu
	ready  chan struct{} // closed once the opening record's write returned
	err    error         // of that write; read after ready
}

func (a *Aggregator) interval() time.Duration {
	if a.Interval > 0 {
		return a.Interval
	}
	return DefaultInterval
}

func (a *Aggregator) maxBuckets() int {
	if a.MaxBuckets > 0 {
		return a.MaxBuckets
	}
	return DefaultMaxBuckets
}

// Record counts one refused attempt and returns the id of the aggregate record it is
// counted in; that record is written before Record returns. An error is the audit log's
// (or ctx's, while another attempt's write of the record is under way).
func (a *Aggregator) Record(ctx context.Context, route, reason, source string) (string, error) {
	now := time.Now()
	key := bucketKey{route, reason, source}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return a.single(ctx, key, now) // after Close: one row each, nothing left unflushed
	}
	if a.open == nil {
		a.open = map[bucketKey]*bucket{}
	}
	b, ok := a.open[key]
	if !ok && len(a.open) >= a.maxBuckets() {
		key = bucketKey{"*", "*", OverflowSource}
		b, ok = a.open[key]
	}
	var expired *bucket
	if ok && now.Sub(b.opened) >= a.interval() && isReady(b) {
		expired, ok = b, false // the flusher has not come by yet: close it here
		delete(a.open, key)
	}
	if ok {
		b.count++
		a.mu.Unlock()
		select {
		case <-b.ready:
			return b.id, b.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	b = &bucket{id: audit.NewID("unauth_"), key: key, opened: now, count: 1, ready: make(chan struct{})}
	a.open[key] = b
	a.mu.Unlock()
	if expired != nil {
		a.closeBucket(expired, now)
	}
	// Not the caller's context: other attempts wait on this write.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	b.err = a.Audit.Append(wctx, a.openingRecord(b))
	cancel()
	if b.err != nil {
		a.mu.Lock()
		if a.open[key] == b {
			delete(a.open, key) // the next attempt opens a bucket again
		}
		a.mu.Unlock()
	} else {
		slog.Info("unauthenticated requests: bucket opened", "route", route, "reason", reason, "source", key.source, "auditId", b.id)
	}
	close(b.ready)
	return b.id, b.err
}

func isReady(b *bucket) bool {
	select {
	case <-b.ready:
		return true
	default:
		return false
	}
}

// single writes one attempt as a bucket of its own, opening record only.
func (a *Aggregator) single(ctx context.Context, key bucketKey, now time.Time) (string, error) {
	b := &bucket{id: audit.NewID("unauth_"), key: key, opened: now, count: 1}
	if err := a.Audit.Append(ctx, a.openingRecord(b)); err != nil {
		return "", err
	}
	return b.id, nil
}

// Run closes the buckets whose interval ended, until ctx ends.
func (a *Aggregator) Run(ctx context.Context) {
	periodic.Every(ctx, a.interval()/4, func(now time.Time) { a.flush(now, false) })
}

// Close stops aggregating and writes the closing record of every open bucket. Call it
// after the HTTP server stopped and before the audit log closes.
func (a *Aggregator) Close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.flush(time.Now(), true)
}

// flush closes the buckets whose interval ended (all of them with everything set).
func (a *Aggregator) flush(now time.Time, everything bool) {
	var due []*bucket
	a.mu.Lock()
	for k, b := range a.open {
		if !everything && (now.Sub(b.opened) < a.interval() || !isReady(b)) {
			continue
		}
		delete(a.open, k)
		due = append(due, b)
	}
	a.mu.Unlock()
	for _, b := range due {
		<-b.ready // with everything, an opening write may still be under way
		a.closeBucket(b, now)
	}
}

// closeBucket writes the closing record of b, removed from the map (so its count is final).
func (a *Aggregator) closeBucket(b *bucket, now time.Time) {
	if b.err != nil || b.count <= 1 {
		return
	}
	rec := a.base(b)
	rec.ID, rec.ParentID, rec.Time = audit.AggregateCountID(b.id), b.id, now
	rec.Detail = aggregateDetail(audit.Aggregate{Route: b.key.route, Reason: b.key.reason, Source: b.key.source,
		Count: b.count - 1, Total: b.count, From: stamp(b.opened), Until: stamp(now)})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := a.Audit.Append(ctx, rec); err != nil {
		slog.Error("unauthenticated requests: the closing record of a bucket was lost", "auditId", b.id, "count", b.count-1, "err", err)
		return
	}
	slog.Info("unauthenticated requests: bucket closed", "route", b.key.route, "reason", b.key.reason, "source", b.key.source,
		"auditId", b.id, "attempts", b.count)
}

func (a *Aggregator) openingRecord(b *bucket) store.AuditRecord {
	rec := a.base(b)
	rec.ID, rec.Time = b.id, b.opened
	rec.Detail = aggregateDetail(audit.Aggregate{Route: b.key.route, Reason: b.key.reason, Source: b.key.source,
		Count: 1, From: stamp(b.opened)})
	return rec
}

func (a *Aggregator) base(b *bucket) store.AuditRecord {
	rev := ""
	if a.Revision != nil {
		rev = a.Revision()
	}
	return store.AuditRecord{Ref: b.key.route, Decision: audit.DecisionUnauthenticated, Outcome: "not-run",
		Reasons:        Reasons(b.key.reason),
		BundleRevision: rev}
}

func aggregateDetail(ag audit.Aggregate) json.RawMessage {
	raw, _ := json.Marshal(map[string]audit.Aggregate{"aggregate": ag})
	return raw
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Reasons are the reasons of an unauthenticated attempt's record: its code, and the
// verifier's reason (never anything of the token) as the detail.
func Reasons(reason string) json.RawMessage {
	raw, _ := json.Marshal([]policy.Reason{{Code: CodeUnauthenticated, Detail: reason}}) // strings encode
	return raw
}
