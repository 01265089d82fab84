// Package prunebench measures what an audit prune costs the append hot path, on any store
// engine: the engines' benchmarks call it (it lives above the store, beside the audit log it
// drives, so the store's conformance suite imports nothing of the layers above it).
package prunebench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/storetest"
)

// BenchAppendDuringPrune measures what a prune costs the audit hot path: a log of `records`
// chained records (written straight through AppendAudits, links computed as the gateway's
// chain does) is pruned with audit.Prune while `writers` goroutines append through an
// audit.Log; the append latency percentiles during the prune are reported beside those of
// the same writers for as long before it (the baseline, same process, same machine load).
// It runs once whatever b.N is: run it with -benchtime 1x.
func BenchAppendDuringPrune(b *testing.B, s store.Store, records, writers int) {
	ctx := context.Background()
	key := []byte("bench chain key")
	// The log spans 4 days from noon, 100 days ago: on a store partitioned by day
	// (PostgreSQL), whose partitions maintenance created as the days came, the prune drops
	// 3.5 days' partitions and deletes the boundary day's half in batches.
	old := time.Now().UTC().Add(-100 * 24 * time.Hour).Truncate(24 * time.Hour).Add(12 * time.Hour)
	const span = 4 * 24 * time.Hour
	step := span / time.Duration(records)
	if p, ok := s.(store.AuditPartitioner); ok {
		if _, err := p.EnsureAuditPartitions(ctx, old, old.Add(span)); err != nil {
			b.Fatal(err)
		}
	}
	fillStart := time.Now()
	var prev string
	const batch = 1000
	for start := 0; start < records; start += batch {
		rs := make([]store.AuditRecord, 0, batch)
		for i := start; i < min(start+batch, records); i++ {
			r := storetest.AuditRecord(fmt.Sprintf("inv_fill_%08d", i))
			r.Time = store.Stamp(old.Add(time.Duration(i) * step))
			r.Chain = store.ChainLink{ChainID: "ch_fill", Seq: int64(i + 1)}
			r.Chain.Hash = audit.LinkHash(key, prev, r)
			prev = r.Chain.Hash
			rs = append(rs, r)
		}
		if err := s.AppendAudits(ctx, rs); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("filled %d records in %v", records, time.Since(fillStart).Round(time.Second))

	chain, err := audit.StartChain(ctx, s, key)
	if err != nil {
		b.Fatal(err)
	}
	l := &audit.Log{Store: s, Chain: chain}
	defer l.Close()
	// 0 baseline; 1 the prune reading (finding, verifying the records to remove); 2 the
	// prune removing them (after its checkpoint: drops, batched deletes); 3 stop.
	var phase atomic.Int32
	var mu sync.Mutex
	lat := [3][]time.Duration{}
	var wg sync.WaitGroup
	var n atomic.Int64
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				p := phase.Load()
				if p == 3 {
					return
				}
				r := storetest.AuditRecord(fmt.Sprintf("inv_live_%d_%d", w, i))
				r.Time = time.Now()
				t0 := time.Now()
				if err := l.Append(ctx, r); err != nil {
					b.Error(err)
					return
				}
				d := time.Since(t0)
				n.Add(1)
				mu.Lock()
				lat[p] = append(lat[p], d)
				mu.Unlock()
			}
		}()
	}
	// The baseline runs as long as the prune will: first the prune, timed, while phase 1
	// records; then phase 0 for as long. A baseline taken first would be the same.
	phase.Store(1)
	pruneStart := time.Now()
	var removeStart time.Time
	phased := checkpointed{s, func() { removeStart = time.Now(); phase.Store(2) }}
	res, err := audit.Prune(ctx, phased, [][]byte{key}, audit.PruneOptions{Before: old.Add(span)})
	took := time.Since(pruneStart)
	if err != nil {
		b.Fatal(err)
	}
	removal := time.Since(removeStart)
	phase.Store(0)
	time.Sleep(took) // the baseline: as long as the prune took, same writers
	phase.Store(3)
	wg.Wait()
	if res.Deleted != int64(records) {
		b.Fatalf("pruned %d records, want %d", res.Deleted, records)
	}
	pct := func(ds []time.Duration, p float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(float64(len(ds))*p))]
	}
	reading, removing, base := lat[1], lat[2], lat[0]
	during := append(slices.Clone(reading), removing...)
	b.Logf("prune of %d records took %v (%.0f records/s), its removal (after the checkpoint) %v; appends during it: %d, p50 %v, p99 %v, max %v; "+
		"of which while it read: %d, p50 %v, p99 %v, max %v; while it removed: %d, p50 %v, p99 %v, max %v; baseline (no prune, as long): %d, p50 %v, p99 %v, max %v",
		records, took.Round(time.Millisecond), float64(records)/took.Seconds(), removal.Round(time.Millisecond),
		len(during), pct(during, 0.5), pct(during, 0.99), pct(during, 1),
		len(reading), pct(reading, 0.5), pct(reading, 0.99), pct(reading, 1),
		len(removing), pct(removing, 0.5), pct(removing, 0.99), pct(removing, 1),
		len(base), pct(base, 0.5), pct(base, 0.99), pct(base, 1))
	b.ReportMetric(float64(pct(during, 0.99).Microseconds()), "p99-during-µs")
	b.ReportMetric(float64(pct(removing, 0.99).Microseconds()), "p99-removing-µs")
	b.ReportMetric(float64(pct(base, 0.99).Microseconds()), "p99-baseline-µs")
	b.ReportMetric(took.Seconds(), "prune-s")
	b.ReportMetric(removal.Seconds(), "removal-s")
	if v, err := audit.Verify(ctx, s, [][]byte{key}, time.Time{}); err != nil || !v.Verified {
		b.Fatalf("verify after the prune: %+v, %v", v, err)
	}
}

// checkpointed is a store telling when a prune's checkpoint is recorded: the prune reads
// the records to remove before it and removes them after.
type checkpointed struct {
	store.Store
	done func()
}

func (c checkpointed) CheckpointPrune(ctx context.Context, b store.PruneBoundary, bases []store.ChainHead) error {
	err := c.Store.CheckpointPrune(ctx, b, bases)
	c.done()
	return err
}

// PruneBenchRecords is the log size of BenchAppendDuringPrune: $XEMA_PRUNE_BENCH_RECORDS, or
// 1,000,000.
func PruneBenchRecords() int {
	if n, err := strconv.Atoi(os.Getenv("XEMA_PRUNE_BENCH_RECORDS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}
