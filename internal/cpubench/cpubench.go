// Package cpubench reports a benchmark's process CPU time per iteration. On a machine shared
// with other work ns/op is wall time and grows with the load; CPU time mostly does not.
package cpubench

import (
	"runtime"
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
