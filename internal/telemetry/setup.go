package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Exporter is the trace exporter the OTEL_* environment selects.
type Exporter struct {
	// Protocol is "grpc" or "http/protobuf"; "" means tracing is off.
	Protocol string
}

// ExporterFromEnv reads the standard variables: tracing is off when OTEL_SDK_DISABLED is
// true, when OTEL_TRACES_EXPORTER is none, and when neither OTEL_TRACES_EXPORTER=otlp nor an
// OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set.
// The protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL,
// else http/protobuf (the specification's default). The endpoint, headers, timeout,
// compression and TLS variables are read by the OTLP exporters themselves.
func ExporterFromEnv(getenv func(string) string) (Exporter, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return Exporter{}, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return Exporter{}, nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return Exporter{}, nil
		}
	case "otlp":
	default:
		return Exporter{}, fmt.Errorf("OTEL_TRACES_EXPORTER %q: this gateway exports otlp or none", exp)
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "", "http/protobuf":
		return Exporter{Protocol: "http/protobuf"}, nil
	case "grpc":
		return Exporter{Protocol: "grpc"}, nil
	}
	return Exporter{}, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", proto)
}

// Tracing is the process's tracer provider; the zero value (tracing off) does nothing.
type Tracing struct {
	provider *sdktrace.TracerProvider
	steps    *tracerOf // the funnel steps' tracer it installed
}

// Enabled reports whether spans are exported.
func (t *Tracing) Enabled() bool { return t != nil && t.provider != nil }

// SetupTracing installs the global tracer provider and the W3C trace-context propagator when
// the environment asks for traces; otherwise the global no-op provider stays and nothing is
// wrapped. version is the service.version resource attribute.
func SetupTracing(ctx context.Context, version string) (*Tracing, error) {
	exp, err := ExporterFromEnv(os.Getenv)
	if err != nil || exp.Protocol == "" {
		return &Tracing{}, err
	}
	var exporter sdktrace.SpanExporter
	switch exp.Protocol {
	case "grpc":
		exporter, err = otlptracegrpc.New(ctx)
	default:
		exporter, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (WithFromEnv, applied last) win.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", "xema"), attribute.String("service.version", version)),
		resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	// The sampler follows OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG (read by the SDK).
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	steps := &tracerOf{tp.Tracer(instrumentation)}
	stepTracer.Store(steps)
	return &Tracing{provider: tp, steps: steps}, nil
}

// Shutdown flushes the spans still buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	stepTracer.CompareAndSwap(t.steps, nil)
	return t.provider.Shutdown(ctx)
}

// Handler wraps the gateway's HTTP handler in a server span per request (named by method;
// the funnel's step spans are its children) that continues an incoming traceparent.
func (t *Tracing) Handler(h http.Handler) http.Handler {
	if !t.Enabled() {
		return h
	}
	return otelhttp.NewHandler(h, "xema", otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		return r.Method
	}))
}

// Transport wraps an outbound transport (http providers, MCP servers) in client spans that
// propagate the trace context (traceparent) to the provider.
func (t *Tracing) Transport(rt http.RoundTripper) http.RoundTripper {
	if !t.Enabled() || rt == nil {
		return rt // nil stays nil: never http.DefaultTransport, which skips the egress policy
	}
	return otelhttp.NewTransport(rt)
}
