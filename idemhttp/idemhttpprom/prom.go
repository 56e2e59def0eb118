// Package idemhttpprom exports idemhttp's request outcomes as Prometheus
// metrics. It is a separate package (and module) so that idemhttp does not
// depend on Prometheus.
//
//	h, err := idemhttpprom.New(registry)
//	...
//	mw, err := idemhttp.New(store, idemhttp.WithHooks(h))
//
// Metrics, named like idem's other components (idem_<component>_<what>):
//
//	idem_http_requests_total{outcome,route}      requests seen by the middleware or proxy
//	idem_http_request_duration_seconds{outcome}  time spent in it, handler included
//
// The outcomes are idemhttp's [idemhttp.Outcome] values. The route is
// idemhttp.WithRoute's name, else the http.ServeMux pattern that routed
// the request, else "default" (idemhttp.DefaultRoute): a bounded set,
// never a raw path. The duration histogram is not split by route, to keep
// its series (buckets × outcomes) few.
package idemhttpprom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/internal/promconfig"
)

// Option configures [New]. An option that cannot apply returns an error
// wrapping idem.ErrInvalidOption, and New returns it.
type Option func(*config) error

type config = promconfig.Config

// WithNamespace sets the first part of every metric's name (default "idem").
func WithNamespace(ns string) Option { return promconfig.Namespace(ns) }

// WithConstLabels adds labels to every metric, to tell several proxies
// apart in one registry.
func WithConstLabels(l prometheus.Labels) Option {
	return promconfig.ConstLabels(l, "outcome", "route")
}

// WithBuckets sets the duration histogram's buckets in seconds (default
// 100 µs to about 15 min in steps of 2.5×). They must be increasing.
func WithBuckets(b []float64) Option { return promconfig.Buckets(b) }

// Hooks implements idemhttp.Hooks and idemhttp.RouteHooks with Prometheus
// collectors.
type Hooks struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

var _ idemhttp.RouteHooks = (*Hooks)(nil)

// New registers the collectors with reg and returns hooks to pass to
// idemhttp.WithHooks. A nil reg or a bad option is an error wrapping
// idem.ErrInvalidOption; registering twice with one registry fails (the
// registry's AlreadyRegisteredError).
func New(reg prometheus.Registerer, opts ...Option) (*Hooks, error) {
	cfg, err := promconfig.New("idemhttpprom", reg, prometheus.ExponentialBuckets(0.0001, 2.5, 14), opts)
	if err != nil {
		return nil, err
	}
	h := &Hooks{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: cfg.Namespace, Subsystem: "http", Name: "requests_total", ConstLabels: prometheus.Labels(cfg.Labels),
			Help: "Requests seen by the idempotency middleware, by outcome and route.",
		}, []string{"outcome", "route"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: cfg.Namespace, Subsystem: "http", Name: "request_duration_seconds", ConstLabels: prometheus.Labels(cfg.Labels),
			Help:    "Time spent in the idempotency middleware, handler included, by outcome.",
			Buckets: cfg.Buckets,
		}, []string{"outcome"}),
	}
	if err := promconfig.Register[prometheus.Collector](cfg, reg, h.requests, h.duration); err != nil {
		return nil, err
	}
	return h, nil
}

// Request implements idemhttp.Hooks: the request is counted under
// idemhttp.DefaultRoute. The middleware calls RequestRoute instead.
func (h *Hooks) Request(o idemhttp.Outcome, d time.Duration) {
	h.RequestRoute(idemhttp.DefaultRoute, o, d)
}

// RequestRoute implements idemhttp.RouteHooks.
func (h *Hooks) RequestRoute(route string, o idemhttp.Outcome, d time.Duration) {
	h.requests.WithLabelValues(string(o), route).Inc()
	h.duration.WithLabelValues(string(o)).Observe(d.Seconds())
}
