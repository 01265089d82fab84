package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/postgres"
	"github.com/xemahq/xema/internal/store/sqlite"
	"github.com/xemahq/xema/internal/store/storetest"
	"github.com/xemahq/xema/internal/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

func openSQLite(tb testing.TB) store.Store {
	tb.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(tb.TempDir(), "x.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func openPostgres(tb testing.TB) store.Store {
	tb.Helper()
	s, err := postgres.Open(context.Background(), testpg.NewDatabase(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// openMemory is the counter of the embedded default: in memory, saved to SQLite.
func openMemory(tb testing.TB) Counter {
	tb.Helper()
	m, err := LoadMemory(context.Background(), openSQLite(tb), time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

var engines = []struct {
	name string
	open func(testing.TB) Counter
}{
	{"memory", openMemory},
	{"sqlite", func(tb testing.TB) Counter { return openSQLite(tb) }},
	{"postgres", func(tb testing.TB) Counter { return openPostgres(tb) }},
}

func rate(n int, per string) policy.Obligation {
	return policy.Obligation{Kind: KindRate, Requests: n, Per: per}
}

func quota(n int, per string) policy.Obligation {
	return policy.Obligation{Kind: KindQuota, Requests: n, Per: per}
}

func TestTake(t *testing.T) {
	start := time.Unix(1_699_920_000, 0) // a multiple of 24h: every window starts here
	key := Key{Org: "acme", Ref: "kb:page.read@1", Subject: "agent:bot", Environment: "project"}
	cases := []struct {
		name      string
		obs       []policy.Obligation
		calls     int
		wantUsage *policy.Usage // of the call after `calls` admitted ones
	}{
		{"no limits", []policy.Obligation{{Kind: "approval"}}, 10, nil},
		{"rate", []policy.Obligation{rate(3, "1m")}, 3, &policy.Usage{RateExceeded: true, RetryAfterSeconds: 50}},
		{"quota", []policy.Obligation{quota(2, "24h")}, 2, &policy.Usage{QuotaExceeded: true, RetryAfterSeconds: 86390}},
		{"rate before quota", []policy.Obligation{quota(5, "24h"), rate(2, "1m")}, 2, &policy.Usage{RateExceeded: true, RetryAfterSeconds: 50}},
	}
	for _, e := range engines {
		for _, tc := range cases {
			t.Run(e.name+"/"+tc.name, func(t *testing.T) {
				now := start.Add(10 * time.Second)
				l := &Limiter{Counter: e.open(t), Now: func() time.Time { return now }}
				for i := range tc.calls {
					if u, err := l.Take(context.Background(), key, tc.obs); err != nil || u != nil {
						t.Fatalf("call %d: usage %+v err %v; want admitted", i+1, u, err)
					}
				}
				u, err := l.Take(context.Background(), key, tc.obs)
				if err != nil {
					t.Fatal(err)
				}
				if (u == nil) != (tc.wantUsage == nil) || (u != nil && *u != *tc.wantUsage) {
					t.Fatalf("call %d: usage %+v, want %+v", tc.calls+1, u, tc.wantUsage)
				}
				other := key
				other.Subject = "agent:other"
				if u, err := l.Take(context.Background(), other, tc.obs); err != nil || u != nil {
					t.Fatalf("another subject: usage %+v err %v; want its own counter", u, err)
				}
				// The same subject ref in another org is another caller.
				otherOrg := key
				otherOrg.Org = "beta"
				if u, err := l.Take(context.Background(), otherOrg, tc.obs); err != nil || u != nil {
					t.Fatalf("the same subject in another org: usage %+v err %v; want its own counter", u, err)
				}
				// No subject or environment holding a "|" spells another caller's key: with
				// the parts joined by "|", agent:bot|project in x and agent:bot in project|x
				// would share one counter.
				a := Key{Org: "acme", Ref: key.Ref, Subject: "agent:bot|project", Environment: "x"}
				b := Key{Org: "acme", Ref: key.Ref, Subject: "agent:bot", Environment: "project|x"}
				for range tc.calls + 1 {
					_, _ = l.Take(context.Background(), a, tc.obs)
				}
				if u, err := l.Take(context.Background(), b, tc.obs); err != nil || u != nil {
					t.Fatalf("a key spelled by '|' in its parts: usage %+v err %v; want its own counter", u, err)
				}
			})
		}
	}
}

// TestCounterKeyFormat: a counter's key is exactly what the stored counters carry (fmt's
// format, which counterKey no longer calls): a changed key would start every window from
// zero after an upgrade, admitting calls beyond the limit.
func TestCounterKeyFormat(t *testing.T) {
	for _, k := range []Key{
		{Ref: "kb:page.read@1", Org: "acme", Subject: "agent:a", Environment: "project"},
		{Ref: "r", Org: `a"|b`, Subject: "user:ü\n\t", Environment: "x|y"},
		{Ref: "r", Org: "\xff\xfe", Subject: "\u2028", Environment: ""},
	} {
		for _, lim := range []limit{{kind: KindRate, per: time.Minute}, {kind: KindQuota, per: 24 * time.Hour}, {kind: KindRate, per: 1500 * time.Millisecond}} {
			want := fmt.Sprintf("%s|%s|%s|%q|%q|%q", lim.kind, lim.per, k.Ref, k.Org, k.Subject, k.Environment)
			if got := counterKey(lim, k); got != want {
				t.Errorf("counterKey(%v, %+v) = %s, want %s", lim, k, got, want)
			}
		}
	}
}

func TestTakeNewWindow(t *testing.T) {
	now := time.Unix(1_699_920_000, 0)
	l := &Limiter{Counter: openSQLite(t), Now: func() time.Time { return now }}
	obs := []policy.Obligation{rate(1, "1m")}
	key := Key{Ref: "a:b.c@1", Subject: "agent:x", Environment: "project"}
	if u, _ := l.Take(context.Background(), key, obs); u != nil {
		t.Fatal("first call refused")
	}
	if u, _ := l.Take(context.Background(), key, obs); u == nil || u.RetryAfterSeconds != 60 {
		t.Fatalf("second call: %+v, want refused for 60s", u)
	}
	now = now.Add(time.Minute)
	if u, _ := l.Take(context.Background(), key, obs); u != nil {
		t.Fatalf("next window: %+v, want admitted", u)
	}
}

// The same subject ref in two orgs is two callers: one org's calls spend nothing of the other's.
func TestTakeKeepsOrgsApart(t *testing.T) {
	l := &Limiter{Counter: openSQLite(t)}
	obs := []policy.Obligation{rate(1, "1m")}
	acme := Key{Org: "acme", Ref: "a:b.c@1", Subject: "agent:x", Environment: "project"}
	beta := acme
	beta.Org = "beta"
	if u, _ := l.Take(context.Background(), acme, obs); u != nil {
		t.Fatal("acme's first call refused")
	}
	if u, _ := l.Take(context.Background(), beta, obs); u != nil {
		t.Fatalf("beta's first call refused after acme's: %+v", u)
	}
	if u, _ := l.Take(context.Background(), acme, obs); u == nil {
		t.Fatal("acme's second call admitted over its limit")
	}
}

func TestTakeMalformed(t *testing.T) {
	l := &Limiter{Counter: openSQLite(t)}
	for _, o := range []policy.Obligation{rate(0, "1m"), rate(-1, "1m"), rate(1, "soon"), quota(1, "10ms")} {
		if _, err := l.Take(context.Background(), Key{Ref: "a:b.c@1", Subject: "s", Environment: "e"}, []policy.Obligation{o}); err == nil {
			t.Errorf("%+v: no error, want refused (fail closed)", o)
		}
	}
}

// A call the quota refuses spends no rate token: the rate counter is as if it never came.
func TestQuotaRefusalSpendsNoRateToken(t *testing.T) {
	key := Key{Ref: "kb:page.read@1", Subject: "agent:bot", Environment: "project"}
	both := []policy.Obligation{rate(3, "1m"), quota(1, "24h")}
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			ctx := context.Background()
			now := time.Unix(1_699_920_010, 0)
			l := &Limiter{Counter: e.open(t), Now: func() time.Time { return now }}
			if u, err := l.Take(ctx, key, both); err != nil || u != nil {
				t.Fatalf("first call: usage %+v err %v; want admitted", u, err)
			}
			for i := range 4 {
				if u, err := l.Take(ctx, key, both); err != nil || u == nil || !u.QuotaExceeded || u.RateExceeded {
					t.Fatalf("call %d over the quota: usage %+v err %v; want QuotaExceeded only", i+2, u, err)
				}
			}
			rateOnly := both[:1]
			for i := range 2 {
				if u, err := l.Take(ctx, key, rateOnly); err != nil || u != nil {
					t.Fatalf("rate token %d of 3 after refused calls: usage %+v err %v; want admitted", i+2, u, err)
				}
			}
			if u, err := l.Take(ctx, key, rateOnly); err != nil || u == nil || !u.RateExceeded {
				t.Fatalf("fourth rate token: usage %+v err %v; want RateExceeded", u, err)
			}
		})
	}
}

// Prune deletes counters whose window ended more than PruneGrace ago, over several batches,
// and leaves the others counting.
func TestPrune(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t)
	now := time.Unix(1_699_920_000, 0) // a window start
	clock := now.Add(-10 * time.Minute)
	l := &Limiter{Counter: s, Now: func() time.Time { return clock }}
	obs := []policy.Obligation{rate(1, "1m")}
	const old = pruneBatch*2 + 500
	for i := range old {
		if u, err := l.Take(ctx, Key{Ref: "a:b.c@1", Subject: fmt.Sprintf("agent:%d", i), Environment: "project"}, obs); err != nil || u != nil {
			t.Fatalf("old call %d: %+v %v", i, u, err)
		}
	}
	clock = now.Add(-time.Minute) // ended at now: within the grace
	recent := Key{Ref: "a:b.c@1", Subject: "agent:recent", Environment: "project"}
	if u, err := l.Take(ctx, recent, obs); err != nil || u != nil {
		t.Fatalf("recent call: %+v %v", u, err)
	}
	clock = now
	live := Key{Ref: "a:b.c@1", Subject: "agent:live", Environment: "project"}
	if u, err := l.Take(ctx, live, obs); err != nil || u != nil {
		t.Fatalf("live call: %+v %v", u, err)
	}
	if n, err := Prune(ctx, s, now); err != nil || n != old {
		t.Fatalf("prune: %d rows, err %v; want %d", n, err, old)
	}
	if n, err := Prune(ctx, s, now); err != nil || n != 0 {
		t.Fatalf("second prune: %d rows, err %v; want 0", n, err)
	}
	if u, err := l.Take(ctx, live, obs); err != nil || u == nil || !u.RateExceeded {
		t.Fatalf("live window after prune: %+v %v; want still spent", u, err)
	}
	clock = now.Add(-time.Minute)
	if u, err := l.Take(ctx, recent, obs); err != nil || u == nil || !u.RateExceeded {
		t.Fatalf("window within the grace after prune: %+v %v; want still spent", u, err)
	}
}

// Two limiters over two connections to one database stand for two replicas: together they
// admit exactly the limit.
func TestTakeAcrossReplicas(t *testing.T) {
	dsn := testpg.NewDatabase(t)
	var replicas []*Limiter
	for range 2 {
		s, err := postgres.Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		replicas = append(replicas, &Limiter{Counter: s})
	}
	const limit = 30
	obs := []policy.Obligation{rate(limit, "1h")}
	var admitted atomic.Int32
	var wg sync.WaitGroup
	for i := range 80 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u, err := replicas[i%2].Take(context.Background(), Key{Ref: "a:b.c@1", Subject: "agent:x", Environment: "project"}, obs)
			if err != nil {
				t.Error(err)
			}
			if u == nil {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	// A window boundary inside the test would reset the count: 1h windows make that rare,
	// and the assertion names it.
	if admitted.Load() != limit {
		t.Fatalf("80 calls across 2 replicas under a limit of %d: %d admitted", limit, admitted.Load())
	}
}

// Concurrent Takes never admit more than the limit, on every counter: 80 callers under a
// rate limit of 30 and a quota of 35 (all or none) are admitted exactly 30 times.
func TestTakeConcurrentExact(t *testing.T) {
	const limit, callers = 30, 80
	obs := []policy.Obligation{rate(limit, "1h"), quota(limit+5, "24h")}
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			l := &Limiter{Counter: e.open(t)}
			key := Key{Org: "acme", Ref: "kb:page.read@1", Subject: "agent:bot", Environment: "project"}
			var admitted, refused atomic.Int32
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					u, err := l.Take(context.Background(), key, obs)
					switch {
					case err != nil:
						t.Error(err)
					case u == nil:
						admitted.Add(1)
					default:
						refused.Add(1)
					}
				})
			}
			wg.Wait()
			// A window boundary inside the test would reset the count: 1h windows make that
			// rare, and the message names it.
			if admitted.Load() != limit || refused.Load() != callers-limit {
				t.Fatalf("%d concurrent calls under a rate limit of %d: %d admitted, %d refused (a window may have ended meanwhile)",
					callers, limit, admitted.Load(), refused.Load())
			}
		})
	}
}

// The usage conformance of the stores holds for the in-memory counter.
func TestMemoryConformance(t *testing.T) {
	storetest.RunCounter(t, func(t *testing.T) storetest.Counter { return openMemory(t).(*Memory) })
}

// A count committed with an audit batch survives a crash: a process that never shut down
// (its store is read again by a second handle, as a restart after kill -9 would) resumes
// the window full; a count whose record never committed is not saved.
func TestMemorySavedWithAuditBatch(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "x.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Unix(1_699_920_010, 0)
	m, err := LoadMemory(ctx, st, now)
	if err != nil {
		t.Fatal(err)
	}
	log := &audit.Log{Store: st, Usage: m}
	defer log.Close()
	l := &Limiter{Counter: m, Now: func() time.Time { return now }}
	key := Key{Org: "acme", Ref: "kb:page.read@1", Subject: "agent:bot", Environment: "project"}
	obs := []policy.Obligation{rate(3, "1h")}
	for i := range 3 {
		if u, err := l.Take(ctx, key, obs); err != nil || u != nil {
			t.Fatalf("call %d: %+v %v", i, u, err)
		}
		if err := log.Append(ctx, store.AuditRecord{ID: fmt.Sprintf("inv_%d", i), Time: now, Decision: audit.DecisionAllowed}); err != nil {
			t.Fatal(err)
		}
	}
	other := key
	other.Subject = "agent:uncommitted" // counted, its record never appended
	if u, err := l.Take(ctx, other, obs); err != nil || u != nil {
		t.Fatalf("uncommitted call: %+v %v", u, err)
	}

	reopened, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	m2, err := LoadMemory(ctx, reopened, now)
	if err != nil {
		t.Fatal(err)
	}
	after := &Limiter{Counter: m2, Now: func() time.Time { return now }}
	if u, err := after.Take(ctx, key, obs); err != nil || u == nil || !u.RateExceeded {
		t.Fatalf("after the crash: %+v %v; want the window still full (3 of 3)", u, err)
	}
	for i := range 3 {
		if u, err := after.Take(ctx, other, obs); err != nil || u != nil {
			t.Fatalf("the uncommitted caller's call %d after the crash: %+v %v; want admitted (its count was not saved)", i, u, err)
		}
	}
}

// Save writes what no batch carried, once; a failed write leaves it for the next one.
func TestMemorySave(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	m, err := LoadMemory(ctx, st, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	add := []store.UsageAdd{{Key: "k", Window: 1, N: 2, Limit: 9, Expires: exp}}
	if _, refused, err := m.AddUsage(ctx, add); err != nil || refused >= 0 {
		t.Fatal(refused, err)
	}
	m.Saved(m.Unsaved(), errors.New("disk full"))
	if err := m.Save(ctx, st); err != nil {
		t.Fatal(err)
	}
	if got, err := st.LoadUsage(ctx, time.Now()); err != nil || len(got) != 1 || got[0].Count != 2 {
		t.Fatalf("saved: %+v %v; want k at 2", got, err)
	}
	if u := m.Unsaved(); u != nil {
		t.Fatalf("unsaved after Save: %+v, want none", u)
	}
}

// A refused call leaves no trace: the counters it created are forgotten, nothing is unsaved.
func TestMemoryRefusalLeavesNothing(t *testing.T) {
	m := &Memory{}
	exp := time.Now().Add(time.Hour)
	adds := []store.UsageAdd{{Key: "rate", Window: 1, N: 1, Limit: 5, Expires: exp}, {Key: "quota", Window: 1, N: 1, Limit: 1, Expires: exp}}
	if _, refused, err := m.AddUsage(context.Background(), adds[1:]); err != nil || refused >= 0 {
		t.Fatal(refused, err)
	}
	m.Unsaved()
	if _, refused, err := m.AddUsage(context.Background(), adds); err != nil || refused != 1 {
		t.Fatalf("refused %d err %v; want the quota (1)", refused, err)
	}
	if len(m.counters) != 1 || m.Unsaved() != nil {
		t.Fatalf("after a refused call: %d counters, unsaved %v; want only the quota's, nothing unsaved", len(m.counters), m.Unsaved())
	}
}

// BenchmarkTake is the cost one rate-limited call adds: one UPSERT round trip on a store,
// a map update under a mutex in memory.
func BenchmarkTake(b *testing.B) {
	obs := []policy.Obligation{rate(1_000_000_000, "1h")}
	for _, e := range engines {
		b.Run(e.name, func(b *testing.B) {
			l := &Limiter{Counter: e.open(b)}
			key := Key{Ref: "kb:page.read@1", Subject: "agent:bot", Environment: "project"}
			b.ReportAllocs()
			for b.Loop() {
				if u, err := l.Take(context.Background(), key, obs); err != nil || u != nil {
					b.Fatal(u, err)
				}
			}
		})
		b.Run(e.name+"/parallel", func(b *testing.B) {
			l := &Limiter{Counter: e.open(b)}
			b.ReportAllocs()
			b.ResetTimer() // not the store's opening
			b.RunParallel(func(pb *testing.PB) {
				key := Key{Ref: "kb:page.read@1", Subject: "agent:bot", Environment: "project"}
				for pb.Next() {
					if u, err := l.Take(context.Background(), key, obs); err != nil || u != nil {
						b.Fatal(u, err)
					}
				}
			})
		})
	}
}
