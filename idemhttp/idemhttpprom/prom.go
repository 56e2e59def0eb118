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
//	idem_http_requests_total{outcome}            requests seen by the middleware or proxy
//	idem_http_request_duration_seconds{outcome}  time spent in it, handler included
//
// The outcomes are idemhttp's [idemhttp.Outcome] values.
package idemhttpprom

import (
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
)

// Option configures [New]. An option that cannot apply returns an error
// wrapping idem.ErrInvalidOption, and New returns it.
type Option func(*config) error

type config struct {
	namespace string
	labels    prometheus.Labels
	buckets   []float64
}

var metricName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// WithNamespace sets the first part of every metric's name (default "idem").
func WithNamespace(ns string) Option {
	return func(c *config) error {
		if !metricName.MatchString(ns) {
			return fmt.Errorf("idemhttpprom: namespace %q is not a metric name: %w", ns, idem.ErrInvalidOption)
		}
		c.namespace = ns
		return nil
	}
}

// WithConstLabels adds labels to every metric, to tell several proxies
// apart in one registry.
func WithConstLabels(l prometheus.Labels) Option {
	return func(c *config) error {
		for k := range l {
			if !metricName.MatchString(k) || k == "outcome" {
				return fmt.Errorf("idemhttpprom: label %q is not a free label name: %w", k, idem.ErrInvalidOption)
			}
		}
		c.labels = l
		return nil
	}
}

// WithBuckets sets the duration histogram's buckets in seconds (default
// 100 µs to about 15 min in steps of 2.5×). They must be increasing.
func WithBuckets(b []float64) Option {
	return func(c *config) error {
		if len(b) == 0 || !slices.IsSorted(b) || len(slices.Compact(slices.Clone(b))) != len(b) {
			return fmt.Errorf("idemhttpprom: buckets %v are not increasing: %w", b, idem.ErrInvalidOption)
		}
		c.buckets = b
		return nil
	}
}

// Hooks implements idemhttp.Hooks with Prometheus collectors.
type Hooks struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

var _ idemhttp.Hooks = (*Hooks)(nil)

// New registers the collectors with reg and returns hooks to pass to
// idemhttp.WithHooks. A nil reg or a bad option is an error wrapping
// idem.ErrInvalidOption; registering twice with one registry fails (the
// registry's AlreadyRegisteredError).
func New(reg prometheus.Registerer, opts ...Option) (*Hooks, error) {
	cfg := config{namespace: "idem", buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14)}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if reg == nil {
		return nil, fmt.Errorf("idemhttpprom: nil registerer: %w", idem.ErrInvalidOption)
	}
	h := &Hooks{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: cfg.namespace, Subsystem: "http", Name: "requests_total", ConstLabels: cfg.labels,
			Help: "Requests seen by the idempotency middleware, by outcome.",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: cfg.namespace, Subsystem: "http", Name: "request_duration_seconds", ConstLabels: cfg.labels,
			Help:    "Time spent in the idempotency middleware, handler included, by outcome.",
			Buckets: cfg.buckets,
		}, []string{"outcome"}),
	}
	for _, c := range []prometheus.Collector{h.requests, h.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("idemhttpprom: %w", err)
		}
	}
	return h, nil
}

// Request implements idemhttp.Hooks.
func (h *Hooks) Request(o idemhttp.Outcome, d time.Duration) {
	h.requests.WithLabelValues(string(o)).Inc()
	h.duration.WithLabelValues(string(o)).Observe(d.Seconds())
}
