package e2e

import (
	"fmt"
	"github.com/xemahq/xema/internal/testnet"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is a fake OTLP/HTTP trace receiver.
type collector struct {
	mu    sync.Mutex
	spans map[string][]map[string]string // span name → attribute sets
	raw   [][]byte
}

func newCollector(t *testing.T) (*collector, string) {
	c := &collector{spans: map[string][]map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.raw = append(c.raw, body)
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					attrs := map[string]string{}
					for _, kv := range sp.Attributes {
						attrs[kv.Key] = kv.Value.GetStringValue()
					}
					c.spans[sp.Name] = append(c.spans[sp.Name], attrs)
				}
			}
		}
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(nil)
	}))
	t.Cleanup(srv.Close)
	return c, srv.URL
}

// TestTracingAndMetrics: with OTEL_* set, every funnel step is a span named after it with
// ref, decision and reason attributes and no input; the trace context reaches the http
// provider; /metrics counts decisions, steps, providers and audit batches.
func TestTracingAndMetrics(t *testing.T) {
	col, url := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", testnet.FreePort(t))
	g := startGateway(t, "", "--metrics-reader", "service:prometheus", "--metrics-addr", metricsAddr)
	prov := newProvider(t)
	g.install(g.adminToken(), biomeDir(t, "ticketing", prov.URL))
	agent := g.token("--subject", "agent:support-bot", "--env", "project")
	public := g.token("--subject", "agent:support-bot", "--env", "public-session")
	// On the API listener metrics are for the named scraper only: they name every org's refs.
	expect(t, g.get("/metrics", ""), http.StatusUnauthorized)
	expect(t, g.get("/metrics", agent), http.StatusForbidden)
	expect(t, g.get("/metrics", g.token("--subject", "service:prometheus", "--env", "service")), http.StatusOK)
	const secretInput = "ada-secret-input@example.com"
	ok := g.post("/v1/capabilities/invoke", agent, `{"ref":"ticket:find@1","input":{"customerEmail":"`+secretInput+`"}}`)
	expect(t, ok, http.StatusOK)
	if tp := prov.last(t).Header.Get("Traceparent"); !strings.HasPrefix(tp, "00-") {
		t.Errorf("the provider got no traceparent: %v", prov.last(t).Header)
	}
	denied := g.post("/v1/capabilities/invoke", public, `{"ref":"ticket:create@1","input":{}}`)
	if denied.Status != http.StatusForbidden && denied.Status != http.StatusNotFound {
		t.Fatalf("public-session create: %d %s", denied.Status, denied.Raw)
	}
	expect(t, g.post("/v1/capabilities/invoke", "", `{"ref":"x","input":{}}`), http.StatusUnauthorized)

	m, err := http.Get("http://" + metricsAddr + "/metrics") // the operator's own listener: no token

	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(m.Body)
	m.Body.Close()
	for _, want := range []string{
		`xema_decisions_total{outcome="allowed",reason="",ref="ticket:find@1"}`,
		`xema_decisions_total{outcome="unauthenticated",reason="missing_token",ref="/v1/capabilities/invoke"}`,
		`xema_funnel_step_duration_seconds_bucket{step="authorize"`,
		`xema_funnel_step_duration_seconds_bucket{step="run"`,
		`xema_provider_duration_seconds_count{outcome="ok",runner="http"}`,
		`xema_audit_batch_size_count`,
		`xema_cache_requests_total{cache="catalog_schema"`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(string(metrics), `xema_decisions_total{outcome="denied"`) && !strings.Contains(string(metrics), `xema_decisions_total{outcome="not_found"`) {
		t.Errorf("/metrics counts no refusal")
	}

	g.stop() // flushes the batched spans
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, step := range []string{"authenticate", "route", "validate", "authorize", "obligations", "resolve", "run", "audit"} {
		if len(col.spans[step]) == 0 {
			t.Errorf("no %q span; got %v", step, keys(col.spans))
		}
	}
	found := false
	for _, a := range col.spans["run"] {
		if a["xema.ref"] == "ticket:find@1" && a["xema.runner"] == "http" && a["xema.outcome"] == "ok" {
			found = true
		}
	}
	if !found {
		t.Errorf("run spans %v", col.spans["run"])
	}
	decided := false
	for _, a := range col.spans["authorize"] {
		if a["xema.decision"] == "allow" && a["xema.ref"] == "ticket:find@1" {
			decided = true
		}
	}
	if !decided {
		t.Errorf("authorize spans %v", col.spans["authorize"])
	}
	for _, raw := range col.raw {
		if strings.Contains(string(raw), secretInput) || strings.Contains(string(raw), agent) {
			t.Fatal("an input or a token was exported in a span")
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
