package server

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var (
	requests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "xema_http_requests_total", Help: "HTTP requests by route and status.",
	}, []string{"route", "status"})
	latency = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name: "xema_http_request_duration_seconds", Help: "HTTP request latency by route.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	}, []string{"route"})
)

// MetricsHandler serves Prometheus metrics. The handler is built once: promhttp.Handler
// registers its own counters on every call and allocates a fresh gatherer handler, work
// that GET /metrics would otherwise repeat per scrape.
func MetricsHandler() http.Handler { return metricsHandler() }

var metricsHandler = sync.OnceValue(promhttp.Handler)

// measure records every request's route, status and latency.
func measure(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		route := c.Path()
		requests.WithLabelValues(route, strconv.Itoa(c.Response().Status)).Inc()
		latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
		return nil
	}
}
