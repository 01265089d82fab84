package audit

import (
	"context"
	"crypto/sha256"
	"flag"
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

var storedFlag = flag.Int("stored", 100_000, "BenchmarkAppendToLargeLog: records stored before measuring")

// BenchmarkAppendToLargeLog is group-commit-chained on SQLite into a log already holding
// -stored records, with the ids the gateway makes (time-ordered, NewID) against random ones
// (RandomID, the format before): a random id lands on a random page of the id index.
func BenchmarkAppendToLargeLog(b *testing.B) {
	for _, ids := range []struct {
		name string
		new  func(prefix string) string
	}{{"ids=random", RandomID}, {"ids=time-ordered", NewID}} {
		b.Run(ids.name, func(b *testing.B) {
			appendToLargeLog(b, func(i int) store.AuditRecord { return loadRecord(ids.new("inv_"), i) },
				func(ctx context.Context, l *Log, n int) error { return l.Append(ctx, loadRecord(ids.new("inv_"), n)) })
		})
	}
}

// appendToLargeLog stores -stored records made by stored, then measures op (the n-th)
// from 16 appenders through a group-committed, chained log on the same SQLite store.
func appendToLargeLog(b *testing.B, stored func(i int) store.AuditRecord, op func(ctx context.Context, l *Log, n int) error) {
	st, _ := openStore(b)
	ctx := context.Background()
	const chunk = 500
	for done := 0; done < *storedFlag; done += chunk {
		rs := make([]store.AuditRecord, chunk)
		for i := range rs {
			rs[i] = stored(done + i)
		}
		if err := st.AppendAudits(ctx, rs); err != nil {
			b.Fatal(err)
		}
	}
	l := &Log{Store: st, Chain: NewChain([]byte("bench-key"))}
	defer l.Close()
	var n atomic.Int64
	b.SetParallelism(8) // 16 appenders: the load run's connections
	b.ReportAllocs()
	b.ResetTimer()
	defer cpubench.PerOp(b)()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(ctx, l, int(n.Add(1))); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// loadRecord is a decision record as the load harness's calls write them (its size and
// columns), from one of 20 callers.
func loadRecord(id string, i int) store.AuditRecord {
	return store.AuditRecord{ID: id, Time: time.Now(), Org: "default", Ref: "bench:noop.read@1", SubjectKind: "agent",
		SubjectRef: fmt.Sprintf("agent:bot%d", i%20), Environment: "project", Decision: DecisionAllowed, Outcome: "admitted",
		BundleRevision: "r4", InputHash: "hmac-sha256:d7e5120b6fba7c1e82b59520964361ffddc74d545d40b240f6df02dfd27b3cb8",
		Reasons: []byte(`[]`), Suggestions: []byte(`[]`),
		Obligations: []byte(`[{"kind":"quota","requests":1000000000,"per":"24h"},{"kind":"rate-limit","requests":100000,"per":"1s"}]`),
		PolicyInput: []byte(`{"ref":"bench:noop.read@1","subject":{"kind":"agent","ref":"agent:bot"},"groups":[],"roles":[],"org":"default","environment":"project","resource":"a","armed":["*"]}`)}
}

// BenchmarkAppendCall is the two records of one call of the load harness's funnel (its
// decision record, then its outcome record) appended group-committed and chained on SQLite
// into a log holding -stored records, for its two kinds of traffic: the same call again
// (one resource, one input hash) and a distinct resource per call (a resource and an input
// hash of its own): what the records of a cache-defeating call cost the writer over a
// cached call's (nothing measurable: BENCHMARKS.md, the funnel's section).
func BenchmarkAppendCall(b *testing.B) {
	for _, traffic := range []struct {
		name     string
		resource func(n int) string
	}{{"traffic=cached", func(int) string { return "a" }}, {"traffic=cache-defeating", func(n int) string { return fmt.Sprintf("r%d", n) }}} {
		b.Run(traffic.name, func(b *testing.B) {
			appendToLargeLog(b, func(i int) store.AuditRecord { return callRecord(NewID("inv_"), traffic.resource(i)) },
				func(ctx context.Context, l *Log, n int) error {
					decision := callRecord(NewID("inv_"), traffic.resource(n))
					if err := l.Append(ctx, decision); err != nil {
						return err
					}
					outcome := decision
					outcome.ID, outcome.ParentID, outcome.Outcome, outcome.PolicyInput = OutcomeID(decision.ID), decision.ID, "ok", nil
					return l.Append(ctx, outcome)
				})
		})
	}
}

// callRecord is a decision record of the funnel's no-op call on resource, as the load
// harness's gateway writes it (its columns, its input hash over the resource).
func callRecord(id, resource string) store.AuditRecord {
	r := loadRecord(id, 0)
	r.SubjectRef = "agent:support-bot"
	r.InputHash = fmt.Sprintf("hmac-sha256:%064x", sha256.Sum256([]byte(resource)))
	r.PolicyInput = fmt.Appendf(nil, `{"ref":"bench:noop.read@1","subject":{"kind":"agent","ref":"agent:support-bot"},"groups":[],"roles":[],"org":"default","environment":"project","resource":%q,"armed":["*"]}`, resource)
	return r
}
