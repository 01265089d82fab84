package unauth

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/store/sqlite"
)

// TestAggregatorBoundsRows floods attempts and checks that every id resolves when
// answered, the rows are bounded by the buckets, and the counts sum to the attempts.
func TestAggregatorBoundsRows(t *testing.T) {
	for _, tc := range []struct {
		name       string
		attempts   int
		sources    int
		maxBuckets int
		wantIDs    int // distinct ids (buckets)
	}{
		{"one source", 2000, 1, 0, 1},
		{"four sources", 2000, 4, 0, 4},
		{"overflow folds into one bucket", 2000, 50, 3, 4},
		{"single attempt writes one row", 1, 1, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st, log := unauthLog(t)
			agg := &Aggregator{Audit: log, Interval: time.Hour, MaxBuckets: tc.maxBuckets}
			var mu sync.Mutex
			ids := map[string]bool{}
			var wg sync.WaitGroup
			work := make(chan int)
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range work {
						id, err := agg.Record(ctx, "/v1/capabilities/invoke", "missing_token", fmt.Sprintf("10.0.0.%d", i%tc.sources))
						if err != nil {
							t.Error(err)
							return
						}
						// The id resolves before the answer is sent.
						if _, err := st.GetAudit(ctx, id); err != nil {
							t.Errorf("id %s answered before it resolves: %v", id, err)
						}
						mu.Lock()
						ids[id] = true
						mu.Unlock()
					}
				}()
			}
			for i := range tc.attempts {
				work <- i
			}
			close(work)
			wg.Wait()
			agg.Close()
			log.Close()
			if len(ids) != tc.wantIDs {
				t.Fatalf("%d distinct ids, want %d", len(ids), tc.wantIDs)
			}
			var sum int64
			rows := 0
			for id := range ids {
				for _, rid := range []string{id, audit.AggregateCountID(id)} {
					rec, err := st.GetAudit(ctx, rid)
					if err != nil {
						continue
					}
					rows++
					ag := audit.AggregateOf(rec)
					if ag == nil {
						t.Fatalf("record %s has no aggregate: %s", rid, rec.Detail)
					}
					sum += ag.Count
				}
			}
			if sum != int64(tc.attempts) {
				t.Fatalf("counts sum to %d, want %d", sum, tc.attempts)
			}
			if rows > 2*tc.wantIDs {
				t.Fatalf("%d rows for %d buckets", rows, tc.wantIDs)
			}
		})
	}
}

// TestAggregatorIntervals: a new interval opens a new bucket; the flusher closes the
// old one with its count.
func TestAggregatorIntervals(t *testing.T) {
	ctx := context.Background()
	st, log := unauthLog(t)
	defer log.Close()
	agg := &Aggregator{Audit: log, Interval: time.Hour}
	first, _ := agg.Record(ctx, "/mcp", "expired", "1.2.3.4")
	again, _ := agg.Record(ctx, "/mcp", "expired", "1.2.3.4")
	other, _ := agg.Record(ctx, "/mcp", "bad_signature", "1.2.3.4")
	if first != again || first == other {
		t.Fatalf("ids %s %s %s: same key same bucket, other reason another", first, again, other)
	}
	agg.flush(time.Now().Add(2*time.Hour), false) // the interval ended
	rec, err := st.GetAudit(ctx, audit.AggregateCountID(first))
	if err != nil {
		t.Fatalf("closing record: %v", err)
	}
	if ag := audit.AggregateOf(rec); ag == nil || ag.Count != 1 || ag.Total != 2 || rec.ParentID != first {
		t.Fatalf("closing record %+v %s", rec, rec.Detail)
	}
	if _, err := st.GetAudit(ctx, audit.AggregateCountID(other)); err == nil {
		t.Fatal("a bucket of one attempt wrote a closing record")
	}
	next, _ := agg.Record(ctx, "/mcp", "expired", "1.2.3.4")
	if next == first {
		t.Fatal("a closed bucket was reused")
	}
}

// unauthLog opens a SQLite store in t's temp dir (closed when t ends) and an audit log on it.
func unauthLog(t *testing.T) (*sqlite.Store, *audit.Log) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "xema.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, &audit.Log{Store: st}
}
