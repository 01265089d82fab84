package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// BenchAuditStats measures the read behind GET /v1/stats over a log of `records` chained
// records spread over the last 7 days of two orgs (20 refs, allowed calls with their
// outcome records, denials with reasons, held and failed calls, people's reads): the pass
// that folds them into the rollups (AdvanceAuditRollups, in chunks as the gateway runs it),
// then AuditStats of each overview window, with the rollups caught up and with 2,000
// records not folded yet (what the tail read costs between two passes). It runs once
// whatever b.N is: run it with -benchtime 1x.
func BenchAuditStats(b *testing.B, s store.Store, records int) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	start := now.Add(-7 * 24 * time.Hour)
	step := 7 * 24 * time.Hour / time.Duration(records)
	fillStart := time.Now()
	const batch = 1000
	seq := int64(0)
	add := func(from, to int) {
		for lo := from; lo < to; lo += batch {
			rs := make([]store.AuditRecord, 0, batch)
			for i := lo; i < min(lo+batch, to); i++ {
				seq++
				r := benchStatsRecord(i, start.Add(time.Duration(i)*step))
				r.Chain = store.ChainLink{ChainID: "ch_bench", Seq: seq, Hash: "h"}
				rs = append(rs, r)
			}
			if err := s.AppendAudits(ctx, rs); err != nil {
				b.Fatal(err)
			}
		}
	}
	tail := 2000
	add(0, records-tail)
	b.Logf("filled %d records in %v", records-tail, time.Since(fillStart).Round(time.Second))

	foldStart := time.Now()
	var folded int64
	for {
		p, err := s.AdvanceAuditRollups(ctx, now, 5000)
		if err != nil {
			b.Fatal(err)
		}
		folded += p.Folded
		if p.Left == 0 {
			break
		}
	}
	took := time.Since(foldStart)
	b.Logf("the pass folded %d records in %v (%.0f records/s)", folded, took.Round(time.Millisecond), float64(folded)/took.Seconds())
	b.ReportMetric(float64(folded)/took.Seconds(), "folded/s")

	measure := func(label string) {
		for _, w := range []struct {
			name         string
			span, bucket time.Duration
		}{{"1h", time.Hour, time.Minute}, {"24h", 24 * time.Hour, 15 * time.Minute}, {"7d", 7 * 24 * time.Hour, time.Hour}} {
			var ds []time.Duration
			var calls int64
			for range 15 {
				t0 := time.Now()
				st, err := s.AuditStats(ctx, store.AuditStatsQuery{Org: "acme", Since: now.Add(-w.span), Until: now, Bucket: w.bucket, Top: 10,
					Calls: statsCalls, Omit: &store.AuditOmit{SubjectKind: "user", Refs: []string{"audit:stats.get@1"}}})
				ds = append(ds, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				calls = 0
				for _, c := range st.Series {
					calls += c.Count
				}
			}
			slices.Sort(ds)
			b.Logf("%s: AuditStats %s over %d records: p50 %v, max %v (%d calls counted)", label, w.name, records, ds[len(ds)/2], ds[len(ds)-1], calls)
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), label+"-"+w.name+"-p50-µs")
		}
	}
	measure("folded")
	add(records-tail, records)
	measure("tail")
}

// benchStatsRecord is the i-th record of BenchAuditStats's mix, at t.
func benchStatsRecord(i int, t time.Time) store.AuditRecord {
	r := store.AuditRecord{ID: fmt.Sprintf("st_%09d", i), Org: "acme", Time: t, Ref: fmt.Sprintf("kb:op%02d@1", i%20),
		SubjectKind: "agent", SubjectRef: "agent:bot", Environment: "project", Decision: "allowed", BundleRevision: "rev-1",
		InputHash: "sha256:x", Outcome: "", Reasons: json.RawMessage(`[]`)}
	if i%7 == 0 {
		r.Org = "globex"
	}
	switch i % 10 {
	case 0, 1, 2:
	case 3, 4: // the outcome record of the call before
		r.Runner, r.Outcome, r.LatencyMicros, r.ParentID = "http", "ok", int64(1000+i%5000), fmt.Sprintf("st_%09d", i-1)
		if i%50 == 3 {
			r.Outcome = "PROVIDER_ERROR"
		}
	case 5, 6:
		r.Decision, r.Reasons = "denied", json.RawMessage(`[{"code":"MISSING_GRANT"},{"code":"NOT_SAFE_FOR_AGENTS"}]`)
	case 7:
		r.Decision = "pending-approval"
	case 8:
		r.Decision = "invalid-input"
	case 9:
		r.SubjectKind, r.SubjectRef, r.Ref = "user", "user:alice", "audit:stats.get@1"
	}
	return r
}

// StatsBenchRecords is the log size of BenchAuditStats: $XEMA_STATS_BENCH_RECORDS, or 200,000.
func StatsBenchRecords() int {
	if n, err := strconv.Atoi(os.Getenv("XEMA_STATS_BENCH_RECORDS")); err == nil && n > 0 {
		return n
	}
	return 200_000
}
