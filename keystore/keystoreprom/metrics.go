// Package keystoreprom wraps a [keystore.Store] with Prometheus metrics.
// It is a separate package (and module) so that keystore and its stores do
// not depend on Prometheus.
//
//	m, err := keystoreprom.New(registry, keystoreprom.WithConstLabels(prometheus.Labels{"store": "pg"}))
//	...
//	s, err := m.Wrap(store)
//	...
//	res, replayed, err := keystore.Do(ctx, s, key, fp, fn)
//
// Metrics (namespace "idem" unless [WithNamespace] says otherwise):
//
//	idem_keystore_reservations_total{outcome}     acquired, in_progress, done, mismatch, error
//	idem_keystore_lease_takeovers_total           acquisitions that replaced an expired lease
//	idem_keystore_lease_lost_total{op}            complete, release, extend refused for a stale token
//	idem_keystore_errors_total{op}                reserve, complete, release, extend, sweep: store or input errors
//	idem_keystore_operation_duration_seconds{op}  histogram of each call, errors included
//	idem_keystore_swept_total                     keys deleted by Sweep
//
// A rising lease_takeovers_total means holders die or outlive their lease
// between Reserve and Complete; a rising lease_lost_total means the lease is
// too short for the effect, and effects are being repeated.
package keystoreprom

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/promconfig"
	"github.com/idem-go/idem/keystore"
)

// Option configures [New]. An option that cannot apply returns an error
// wrapping idem.ErrInvalidOption, and New returns it.
type Option func(*config) error

type config = promconfig.Config

// WithNamespace sets the first part of every metric's name (default "idem").
func WithNamespace(ns string) Option { return promconfig.Namespace(ns) }

// WithConstLabels adds labels to every metric, to tell several stores apart
// in one registry.
func WithConstLabels(l prometheus.Labels) Option { return promconfig.ConstLabels(l, "op", "outcome") }

// WithBuckets sets the latency histogram's buckets in seconds (default from
// 50 µs to 2.5 s, covering memory, Redis and SQL stores). They must be
// increasing.
func WithBuckets(b []float64) Option { return promconfig.Buckets(b) }

// Metrics is one set of key store collectors, registered by [New]. Every
// store it wraps, and every scoped view of those, counts into it.
type Metrics struct {
	reservations *prometheus.CounterVec
	takeovers    prometheus.Counter
	leaseLost    *prometheus.CounterVec
	errors       *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	swept        prometheus.Counter
}

// Store is a [keystore.Store] that records into its [Metrics] what the
// store it wraps does. It changes no behaviour.
type Store struct {
	inner keystore.Store
	m     *Metrics
}

// New registers the key store collectors with reg. A nil reg or a bad
// option is an error wrapping idem.ErrInvalidOption; registering twice with
// one registry fails (the registry's AlreadyRegisteredError): give each
// Metrics its own labels ([WithConstLabels]) or share one.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	cfg, err := promconfig.New("keystoreprom", reg, []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5}, opts)
	if err != nil {
		return nil, err
	}
	opt := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: cfg.Namespace, Subsystem: "keystore", Name: name, Help: help, ConstLabels: prometheus.Labels(cfg.Labels)}
	}
	m := &Metrics{
		reservations: prometheus.NewCounterVec(prometheus.CounterOpts(opt("reservations_total", "Reserve calls by outcome: acquired, in_progress, done, mismatch, error.")), []string{"outcome"}),
		takeovers:    prometheus.NewCounter(prometheus.CounterOpts(opt("lease_takeovers_total", "Acquisitions that replaced an expired lease whose holder neither completed nor released."))),
		leaseLost:    prometheus.NewCounterVec(prometheus.CounterOpts(opt("lease_lost_total", "Complete, Release or Extend refused because the claim's token is no longer current.")), []string{"op"}),
		errors:       prometheus.NewCounterVec(prometheus.CounterOpts(opt("errors_total", "Calls that failed with a store or input error (not mismatch or lease lost).")), []string{"op"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: cfg.Namespace, Subsystem: "keystore", Name: "operation_duration_seconds",
			Help: "Duration of store calls, errors included.", ConstLabels: prometheus.Labels(cfg.Labels), Buckets: cfg.Buckets,
		}, []string{"op"}),
		swept: prometheus.NewCounter(prometheus.CounterOpts(opt("swept_total", "Expired keys deleted by Sweep."))),
	}
	// Create every series up front, so that dashboards see zeros.
	for _, o := range []string{"acquired", "in_progress", "done", "mismatch", "error"} {
		m.reservations.WithLabelValues(o)
	}
	for _, op := range []string{"complete", "release", "extend"} {
		m.leaseLost.WithLabelValues(op)
	}
	for _, op := range []string{"reserve", "complete", "release", "extend", "sweep"} {
		m.errors.WithLabelValues(op)
		m.duration.WithLabelValues(op)
	}
	if err := promconfig.Register[prometheus.Collector](cfg, reg, m.reservations, m.takeovers, m.leaseLost, m.errors, m.duration, m.swept); err != nil {
		return nil, err
	}
	return m, nil
}

// Wrap returns s with every call counted and timed into m. A nil s is an
// error wrapping idem.ErrInvalidArgument.
func (m *Metrics) Wrap(s keystore.Store) (*Store, error) {
	if s == nil {
		return nil, fmt.Errorf("keystoreprom: nil store: %w", idem.ErrInvalidArgument)
	}
	return &Store{inner: s, m: m}, nil
}

// Unwrap returns the wrapped store.
func (s *Store) Unwrap() keystore.Store { return s.inner }

// Reserve implements [keystore.Store.Reserve].
func (s *Store) Reserve(ctx context.Context, key string, fp []byte, lease time.Duration) (keystore.Claim, error) {
	start := time.Now()
	c, err := s.inner.Reserve(ctx, key, fp, lease)
	s.m.duration.WithLabelValues("reserve").Observe(time.Since(start).Seconds())
	switch {
	case errors.Is(err, idem.ErrFingerprintMismatch):
		s.m.reservations.WithLabelValues("mismatch").Inc()
	case err != nil:
		s.m.reservations.WithLabelValues("error").Inc()
		s.m.errors.WithLabelValues("reserve").Inc()
	default:
		s.m.reservations.WithLabelValues(c.State.String()).Inc()
		if c.State == keystore.Acquired && c.Takeover {
			s.m.takeovers.Inc()
		}
	}
	return c, err
}

// Complete implements [keystore.Store.Complete].
func (s *Store) Complete(ctx context.Context, c keystore.Claim, result []byte, ttl time.Duration) error {
	start := time.Now()
	err := s.inner.Complete(ctx, c, result, ttl)
	s.observe("complete", start, err)
	return err
}

// Release implements [keystore.Store.Release].
func (s *Store) Release(ctx context.Context, c keystore.Claim) error {
	start := time.Now()
	err := s.inner.Release(ctx, c)
	s.observe("release", start, err)
	return err
}

func (s *Store) observe(op string, start time.Time, err error) {
	s.m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	switch {
	case errors.Is(err, keystore.ErrLeaseLost):
		s.m.leaseLost.WithLabelValues(op).Inc()
	case err != nil:
		s.m.errors.WithLabelValues(op).Inc()
	}
}

// Extend calls the wrapped store's Extend (see [keystore.Extender]). It
// fails with errors.ErrUnsupported when the wrapped store cannot renew
// leases; keystore.CanExtend looks through Unwrap and reports that, so
// keystore.Do and KeepAlive do not call it then.
func (s *Store) Extend(ctx context.Context, c keystore.Claim, lease time.Duration) (keystore.Claim, error) {
	if !keystore.CanExtend(s.inner) {
		return keystore.Extend(ctx, s.inner, c, lease) // unsupported: not counted
	}
	start := time.Now()
	nc, err := keystore.Extend(ctx, s.inner, c, lease)
	s.observe("extend", start, err)
	return nc, err
}

// Scope returns the wrapped store's view of the scope name, wrapped with
// the same metrics. It fails with errors.ErrUnsupported when the wrapped
// store has no scopes. It implements [keystore.Scoper].
func (s *Store) Scope(name string) (keystore.Store, error) {
	v, err := keystore.Scope(s.inner, name)
	if err != nil {
		return nil, fmt.Errorf("keystoreprom: %w", err)
	}
	return &Store{inner: v, m: s.m}, nil
}

// Sweep calls the wrapped store's Sweep and counts the deleted keys. It
// fails with errors.ErrUnsupported when the wrapped store cannot sweep. It
// implements [keystore.Sweeper].
func (s *Store) Sweep(ctx context.Context, batch int) (int, error) {
	if _, ok := s.inner.(keystore.Sweeper); !ok {
		return keystore.Sweep(ctx, s.inner, batch) // unsupported: not counted
	}
	start := time.Now()
	n, err := keystore.Sweep(ctx, s.inner, batch)
	s.m.swept.Add(float64(n))
	s.observe("sweep", start, err)
	return n, err
}

// Inspect calls the wrapped store's Inspect (see [keystore.Inspector]); it
// fails with errors.ErrUnsupported when the wrapped store cannot inspect.
// Inspections are not counted: they are an operator's, not traffic.
func (s *Store) Inspect(ctx context.Context, key string) (keystore.KeyInfo, error) {
	return keystore.Inspect(ctx, s.inner, key)
}

// List calls the wrapped store's List (see [keystore.Inspector]); it fails
// with errors.ErrUnsupported when the wrapped store cannot list.
func (s *Store) List(ctx context.Context, opts keystore.ListOptions) ([]keystore.KeyInfo, string, error) {
	return keystore.List(ctx, s.inner, opts)
}

// Forget calls the wrapped store's Forget (see [keystore.Forgetter]); it
// fails with errors.ErrUnsupported when the wrapped store cannot forget.
func (s *Store) Forget(ctx context.Context, key string) error {
	return keystore.Forget(ctx, s.inner, key)
}

// Notify calls the wrapped store's Notify (see [keystore.Notifier]); it
// fails with errors.ErrUnsupported when the wrapped store cannot notify,
// and keystore.Await, which looks through Unwrap, then polls. Waits are
// not counted: each Reserve a waiter makes is.
func (s *Store) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return keystore.Notify(ctx, s.inner, key)
}

// Peek calls the wrapped store's Peek (see [keystore.Peeker]); ok is false
// when it has none, and keystore.Await then reserves. Peeks are not
// counted as Reserves.
func (s *Store) Peek(ctx context.Context, key string, fp []byte) (keystore.Claim, bool) {
	return keystore.Peek(ctx, s.inner, key, fp)
}
