package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/policy/policyfixture"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/sqlite"
)

// recordedStore fills a fresh SQLite store with n decision records of agents reading pages.
func recordedStore(tb testing.TB, n int) store.Store {
	tb.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(tb.TempDir(), "replay.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	t0 := time.Now().Add(-time.Hour)
	batch := make([]store.AuditRecord, 0, 1000)
	for i := range n {
		in := policy.Input{Ref: "kb:page.read@1", Subject: policy.Subject{Kind: "agent", Ref: fmt.Sprintf("agent:a%d", i%50)},
			Groups: []string{}, Roles: []string{}, Org: "acme", Environment: "project",
			Resource: fmt.Sprintf("kb/pages/p%d", i%1000), Armed: []string{"*"}}
		raw, _ := json.Marshal(in)
		batch = append(batch, store.AuditRecord{ID: fmt.Sprintf("inv_%07d", i), Org: "acme", Time: t0.Add(time.Duration(i) * time.Microsecond),
			Ref: in.Ref, SubjectKind: "agent", SubjectRef: in.Subject.Ref, Environment: in.Environment, Decision: "allowed",
			Reasons: json.RawMessage(`[]`), BundleRevision: "r1", InputHash: "h", Runner: "http", Outcome: "dispatched", PolicyInput: raw})
		if len(batch) == cap(batch) || i == n-1 {
			if err := st.AppendAudits(context.Background(), batch); err != nil {
				tb.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	return st
}

func engine(tb testing.TB) *policy.Engine {
	tb.Helper()
	data := policyfixture.Data(tb)
	e, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	if err := e.Load(context.Background(), data, "r1"); err != nil {
		tb.Fatal(err)
	}
	return e
}

// BenchmarkReplay: decisions per second re-evaluated over 100,000 recorded calls (read from
// SQLite, decided by the embedded policy, compared).
func BenchmarkReplay(b *testing.B) {
	const n = 100_000
	st, e := recordedStore(b, n), engine(b)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		rep, err := Run(context.Background(), st, e, Window{})
		if err != nil {
			b.Fatal(err)
		}
		if rep.Considered != n {
			b.Fatalf("considered %d, want %d", rep.Considered, n)
		}
		b.ReportMetric(float64(n)/time.Since(start).Seconds(), "decisions/s")
	}
}

func TestRunCountsExactly(t *testing.T) {
	st, e := recordedStore(t, 300), engine(t)
	rep, err := Run(context.Background(), st, e, Window{})
	if err != nil {
		t.Fatal(err)
	}
	// The fixture's grant covers kb/pages/*: every recorded allow stays an allow.
	if rep.Considered != 300 || rep.AllowToDeny != 0 || len(rep.Changes) != 0 || rep.Truncated {
		t.Fatalf("report %+v", rep)
	}
	capped, err := Run(context.Background(), st, e, Window{Limit: 100})
	if err != nil || capped.Considered != 100 || !capped.Truncated {
		t.Fatalf("a limit of 100: %+v %v", capped, err)
	}
	other, err := Run(context.Background(), st, e, Window{Org: "beta"})
	if err != nil || other.Considered != 0 {
		t.Fatalf("another org's window: %+v %v", other, err)
	}
}
