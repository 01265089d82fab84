// Package telemetry is what the funnel tells operators: Prometheus metrics (decisions, step
// latency, provider latency and errors, audit batches, caches) and OpenTelemetry spans, one
// per funnel step. Neither ever carries an input, an output or a secret: only refs, codes,
// runner kinds and audit ids.
package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metric names (docs/operations.md lists them with their labels).
const (
	MetricDecisions        = "xema_decisions_total"
	MetricStepDuration     = "xema_funnel_step_duration_seconds"
	MetricProviderDuration = "xema_provider_duration_seconds"
	MetricProviderErrors   = "xema_provider_errors_total"
	MetricAuditBatchSize   = "xema_audit_batch_size"
	MetricAuditBatchTime   = "xema_audit_batch_duration_seconds"
	MetricCacheRequests    = "xema_cache_requests_total"
	MetricPolicyEvaluation = "xema_policy_evaluations_total"
	MetricApprovalNotify   = "xema_approval_notifications_total"
)

var (
	decisions = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: MetricDecisions,
		Help: "Decisions of the funnel by capability ref, outcome (allowed, denied, invalid, not_found, error, pending_approval) and reason code.",
	}, []string{"ref", "outcome", "reason"})
	stepDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricStepDuration, Help: "Latency of each funnel step (route, validate, authorize, obligations, resolve, run, audit; authenticate at the transport).",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2.5, 14),
	}, []string{"step"})
	providerDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricProviderDuration, Help: "Latency of a run by runner kind (kernel, http, connector, mcp-external, ...) and outcome (ok or the error code).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"runner", "outcome"})
	providerErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: MetricProviderErrors, Help: "Failed runs by runner kind and error code (PROVIDER_ERROR, PROVIDER_TIMEOUT, INVALID_OUTPUT, ...).",
	}, []string{"runner", "code"})
	auditBatchSize = promauto.NewHistogram(prometheus.HistogramOpts{
		Name: MetricAuditBatchSize, Help: "Records committed per audit write batch.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
	})
	auditBatchTime = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricAuditBatchTime, Help: "Time to commit one audit write batch, by result (ok, error).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14),
	}, []string{"result"})
	cacheRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: MetricCacheRequests, Help: "Cache lookups by cache and result (hit, miss); the hit rate is hit / (hit + miss).",
	}, []string{"cache", "result"})
	policyEvaluations = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: MetricPolicyEvaluation, Help: "Policy decisions evaluated by OPA (decision cache misses), by path: residual (OPA's evaluation of the key's residual, prepared by partial evaluation) or full (the whole policy).",
	}, []string{"path"})
	policyByResidual, policyByFull = policyEvaluations.WithLabelValues("residual"), policyEvaluations.WithLabelValues("full")
	approvalNotify                 = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: MetricApprovalNotify, Help: "Delivery attempts of approval notifications by channel (webhook, chat) and result (delivered, retried, failed: given up).",
	}, []string{"channel", "result"})
)

// UnknownRef is the ref label of a call to a ref the catalog does not know: the caller chose
// the ref, so it must not become a label value (unbounded cardinality).
const UnknownRef = "(unknown)"

// Decision counts one audited decision.
func Decision(ref, outcome, reason string) { decisions.WithLabelValues(ref, outcome, reason).Inc() }

// Provider records one run of a runner: its latency, and an error by code.
func Provider(runner, outcome string, seconds float64) {
	providerDuration.WithLabelValues(runner, outcome).Observe(seconds)
	if outcome != "ok" {
		providerErrors.WithLabelValues(runner, outcome).Inc()
	}
}

// AuditBatch records one committed (or failed) audit batch.
func AuditBatch(size int, seconds float64, err error) {
	auditBatchSize.Observe(float64(size))
	result := "ok"
	if err != nil {
		result = "error"
	}
	auditBatchTime.WithLabelValues(result).Observe(seconds)
}

// Cache counts one lookup of a named cache.
func Cache(name string, hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	cacheRequests.WithLabelValues(name, result).Inc()
}

// PolicyEvaluation counts one decision OPA evaluated: by a prepared residual or in full.
func PolicyEvaluation(residual bool) {
	if residual {
		policyByResidual.Inc()
	} else {
		policyByFull.Inc()
	}
}

// ApprovalNotification counts one delivery attempt of an approval notification.
func ApprovalNotification(channel, result string) {
	approvalNotify.WithLabelValues(channel, result).Inc()
}
