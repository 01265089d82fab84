package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/xemahq/xema/internal/apptest"
	"github.com/xemahq/xema/internal/cpubench"
	"github.com/xemahq/xema/internal/gateway"
)

// BenchmarkFirstCall is internal/policy's BenchmarkFirstCall through the whole funnel, in
// process (SQLite, the audit records durable, the provider an httptest server): it invokes
// firstCallKeys capabilities never called before, one after the other, while the policy
// prepares their keys in the background (each decided by the full evaluation meanwhile),
// then, the preparation idle, each again. Every call names a new ticket, so no decision is
// cached. It reports the p50 and p99 of both and the ratio of the p99s. Run with
// -benchtime 1x: a second iteration would find the keys warm.
func BenchmarkFirstCall(b *testing.B) {
	const firstCallKeys = 200
	f := apptest.New(b, apptest.Options{Copies: firstCallKeys})
	bot := apptest.Exec("agent:support-bot", "project", "")
	ctx := context.Background()
	tickets := 0
	call := func(ref string) time.Duration {
		tickets++
		input, _ := json.Marshal(map[string]string{"ticketId": fmt.Sprintf("%08x-0000-4000-8000-000000000000", tickets), "text": "hi"})
		start := time.Now()
		res, err := f.App.Gateway.Invoke(ctx, bot, gateway.Request{Ref: ref, Input: input})
		took := time.Since(start)
		if err != nil || res.Denial != nil {
			b.Fatalf("invoke %s: %+v, %v", ref, res, err)
		}
		return took
	}
	var first, warm []time.Duration
	iteration := 0
	for b.Loop() {
		if iteration++; iteration > 1 {
			b.Fatal("run with -benchtime 1x: the keys are warm after the first iteration")
		}
		for i := range firstCallKeys {
			first = append(first, call(apptest.CopyRef(i)))
		}
		if err := f.App.Policy.WaitPrepared(ctx); err != nil {
			b.Fatal(err)
		}
		for i := range firstCallKeys {
			warm = append(warm, call(apptest.CopyRef(i)))
		}
	}
	cpubench.ReportFirstAndWarm(b, first, warm)
}
