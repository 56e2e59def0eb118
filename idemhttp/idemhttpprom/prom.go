// Package idemhttpprom exports idemhttp's request outcomes as Prometheus
// metrics: idem_http_requests_total{outcome} and
// idem_http_request_duration_seconds{outcome}.
package idemhttpprom

import (
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/prometheus/client_golang/prometheus"
)

// Hooks implements idemhttp.Hooks with Prometheus collectors.
type Hooks struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// New registers the collectors with reg and returns hooks to pass to
// idemhttp.WithHooks.
func New(reg prometheus.Registerer) (*Hooks, error) {
	h := &Hooks{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_http_requests_total",
			Help: "Requests seen by the idempotency middleware, by outcome.",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idem_http_request_duration_seconds",
			Help:    "Time spent in the idempotency middleware, handler included, by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14),
		}, []string{"outcome"}),
	}
	for _, c := range []prometheus.Collector{h.requests, h.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Request implements idemhttp.Hooks.
func (h *Hooks) Request(o idemhttp.Outcome, d time.Duration) {
	h.requests.WithLabelValues(string(o)).Inc()
	h.duration.WithLabelValues(string(o)).Observe(d.Seconds())
}
