package audit

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/cpubench"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/postgres"
	"github.com/xemahq/xema/internal/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// BenchmarkAppend measures one durable audit append under 8 concurrent callers per CPU-pair
// (the load run's 8 workers): a transaction per record, as before, against group commit.
func BenchmarkAppend(b *testing.B) {
	engines := []struct {
		name string
		open func(b *testing.B) store.Store
	}{
		{"sqlite", func(b *testing.B) store.Store { st, _ := openStore(b); return st }},
		{"postgres", func(b *testing.B) store.Store {
			st, err := postgres.Open(context.Background(), testpg.NewDatabase(b))
			if err != nil {
				b.Fatalf("open postgres store: %v", err)
			}
			b.Cleanup(func() { st.Close() })
			return st
		}},
	}
	for _, e := range engines {
		b.Run(e.name+"/transaction-per-record", func(b *testing.B) {
			st := e.open(b)
			parallel(b, func(ctx context.Context, r store.AuditRecord) error { return st.AppendAudit(ctx, r) })
		})
		for _, wait := range []time.Duration{0, time.Millisecond} {
			b.Run(fmt.Sprintf("%s/group-commit-linger-%s", e.name, wait), func(b *testing.B) {
				l := &Log{Store: e.open(b), MaxWait: wait}
				defer l.Close()
				parallel(b, l.Append)
			})
		}
		// The hash chain's cost: an HMAC per record and one head UPSERT per batch.
		b.Run(e.name+"/group-commit-chained", func(b *testing.B) {
			l := &Log{Store: e.open(b), Chain: NewChain([]byte("bench-key"))}
			defer l.Close()
			parallel(b, l.Append)
		})
	}
}

func parallel(b *testing.B, appendFn func(context.Context, store.AuditRecord) error) {
	var n atomic.Int64
	b.SetParallelism(4)
	b.ReportAllocs()
	b.ResetTimer()
	defer cpubench.PerOp(b)()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := appendFn(ctx, record(fmt.Sprintf("inv_%d", n.Add(1)))); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
