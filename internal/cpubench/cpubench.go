// Package cpubench reports a benchmark's process CPU time per iteration. On a machine shared
// with other work ns/op is wall time and grows with the load; CPU time mostly does not.
package cpubench

import (
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"
)

// PerOp starts counting the process's CPU time (user + system, all goroutines: GC workers
// included); the function it returns reports it per iteration as "cpu-ns/op".
func PerOp(b *testing.B) func() {
	runtime.GC() // the set-up's garbage is not the benchmark's
	start := processCPU()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReportFirstAndWarm reports the p50 and p99 latencies of first calls and of warm ones, in
// µs, and the ratio of their p99s (the first-call benchmarks of the policy and the funnel).
func ReportFirstAndWarm(b *testing.B, first, warm []time.Duration) {
	b.ReportMetric(quantileMicros(first, 0.5), "first-p50-µs")
	b.ReportMetric(quantileMicros(first, 0.99), "first-p99-µs")
	b.ReportMetric(quantileMicros(warm, 0.5), "warm-p50-µs")
	b.ReportMetric(quantileMicros(warm, 0.99), "warm-p99-µs")
	b.ReportMetric(quantileMicros(first, 0.99)/quantileMicros(warm, 0.99), "p99-ratio")
}

func quantileMicros(ds []time.Duration, q float64) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(q*float64(len(s))))].Microseconds())
}
