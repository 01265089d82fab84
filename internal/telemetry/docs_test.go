package telemetry

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDocsAndDashboard: every metric is documented in docs/operations.md, and the Grafana
// dashboard queries only metrics that exist.
func TestDocsAndDashboard(t *testing.T) {
	ours := []string{MetricDecisions, MetricStepDuration, MetricProviderDuration, MetricProviderErrors,
		MetricAuditBatchSize, MetricAuditBatchTime, MetricCacheRequests, MetricApprovalNotify, MetricPolicyEvaluation}
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ours {
		if !strings.Contains(string(doc), "`"+m+"`") {
			t.Errorf("docs/operations.md does not name %s", m)
		}
	}
	raw, err := os.ReadFile("../../deploy/grafana/xema-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	known := map[string]bool{"xema_http_requests_total": true, "xema_http_request_duration_seconds": true}
	for _, m := range ours {
		known[m] = true
	}
	for _, m := range regexp.MustCompile(`xema_[a-z_]+`).FindAllString(string(raw), -1) {
		base := regexp.MustCompile(`_(bucket|sum|count)$`).ReplaceAllString(m, "")
		if !known[base] && base != "xema_gateway" {
			t.Errorf("the dashboard queries %s, which xema does not export", m)
		}
	}
}
