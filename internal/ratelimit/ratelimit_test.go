package ratelimit

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/postgres"
	"github.com/xemahq/xema/internal/store/sqlite"
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

var engines = []struct {
	name string
	open func(testing.TB) store.Store
}{{"sqlite", openSQLite}, {"postgres", openPostgres}}

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

// BenchmarkTake is the cost one rate-limited call adds: one UPSERT round trip.
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
