package server

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMetricsHandlerBuiltOnce: asking for the handler costs nothing per request (it is
// built once), and it still serves the exposition format.
func TestMetricsHandlerBuiltOnce(t *testing.T) {
	MetricsHandler()
	if n := testing.AllocsPerRun(20, func() { _ = MetricsHandler() }); n != 0 {
		t.Fatalf("MetricsHandler allocates %v times per call, want 0 (built once)", n)
	}
	for range 2 {
		rec := httptest.NewRecorder()
		MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), "promhttp_metric_handler_requests_total") {
			t.Fatalf("scrape: %d %.200q", rec.Code, rec.Body.String())
		}
	}
}
