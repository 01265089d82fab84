package telemetry

import (
	"context"
	"testing"
)

// BenchmarkStep is one funnel step's span and latency with tracing off (the default): the
// funnel makes six or seven a call.
func BenchmarkStep(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, step := Start(ctx, StepAuthorize, AttrRef.String("t:c@1"))
		step.End("", AttrDecision.String("allowed"))
	}
}
