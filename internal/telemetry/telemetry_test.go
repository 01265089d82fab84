package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace"
)

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func TestExporterFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		proto string
		err   bool
	}{
		{"unset is off", nil, "", false},
		{"endpoint turns it on, http/protobuf by default", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "http/protobuf", false},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, "http/protobuf", false},
		{"otlp exporter", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, "http/protobuf", false},
		{"grpc", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "grpc", false},
		{"traces protocol wins", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, "http/protobuf", false},
		{"none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"}, "", false},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, "", false},
		{"unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "", true},
		{"unknown protocol", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp, err := ExporterFromEnv(func(k string) string { return tc.env[k] })
			if (err != nil) != tc.err || exp.Protocol != tc.proto {
				t.Fatalf("got %+v, %v; want %q, err %v", exp, err, tc.proto, tc.err)
			}
		})
	}
}

func TestTracingOffWrapsNothing(t *testing.T) {
	var tr Tracing
	if tr.Enabled() || tr.Shutdown(context.Background()) != nil {
		t.Fatal("the zero Tracing is not off")
	}
	if tr.Transport(nil) != nil {
		t.Error("an off Tracing wrapped a transport")
	}
}

// TestStepSpans: without a provider a step makes no span (ctx is returned as it is); with
// SetupTracing's, each step is a recording span under ctx's; after Shutdown, none again.
func TestStepSpans(t *testing.T) {
	ctx := context.Background()
	stepCount := func() uint64 {
		var m dto.Metric
		if err := stepObservers[StepValidate].(prometheus.Metric).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	before := stepCount()
	got, step := Start(ctx, StepValidate)
	step.End("")
	if got != ctx || trace.SpanFromContext(got).IsRecording() {
		t.Fatal("tracing off: Start made a span")
	}
	if stepCount() != before+1 {
		t.Fatal("tracing off: the step's latency was not observed")
	}
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	tr, err := SetupTracing(ctx, "test")
	if err != nil || !tr.Enabled() {
		t.Fatalf("SetupTracing: %v", err)
	}
	got, step = Start(ctx, StepValidate, AttrRef.String("t:c@1"))
	step.End("INVALID_INPUT")
	if span := trace.SpanFromContext(got); !span.SpanContext().IsValid() {
		t.Fatal("tracing on: Start made no span")
	}
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if got, step = Start(ctx, StepValidate); got != ctx {
		t.Fatal("after Shutdown: Start still made a span")
	}
	step.End("")
}

func TestMetrics(t *testing.T) {
	Decision("t:c@1", "denied", "GRANT_MISSING")
	Decision("t:c@1", "denied", "GRANT_MISSING")
	if got := counter(t, decisions.WithLabelValues("t:c@1", "denied", "GRANT_MISSING")); got != 2 {
		t.Errorf("decisions %v", got)
	}
	Provider("http", "ok", 0.01)
	Provider("http", "INVALID_OUTPUT", 0.01)
	if got := counter(t, providerErrors.WithLabelValues("http", "INVALID_OUTPUT")); got != 1 {
		t.Errorf("provider errors %v", got)
	}
	if got := counter(t, providerErrors.WithLabelValues("http", "ok")); got != 0 {
		t.Errorf("ok counted as an error: %v", got)
	}
	Cache("catalog_schema", true)
	if got := counter(t, cacheRequests.WithLabelValues("catalog_schema", "hit")); got != 1 {
		t.Errorf("cache %v", got)
	}
	_, step := Start(context.Background(), StepRoute)
	step.End("")
	AuditBatch(3, 0.001, nil)
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		seen[f.GetName()] = true
	}
	for _, name := range []string{MetricDecisions, MetricStepDuration, MetricAuditBatchSize, MetricAuditBatchTime, MetricProviderDuration, MetricProviderErrors, MetricCacheRequests} {
		if !seen[name] {
			t.Errorf("%s is not exported", name)
		}
	}
}
