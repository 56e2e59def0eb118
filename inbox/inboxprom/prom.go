// Package inboxprom exports an inbox's hooks as Prometheus metrics. It is a
// separate package so that inbox does not depend on Prometheus.
//
//	h, err := inboxprom.New(registry)
//	...
//	in, err := inbox.New(db, dialect, "billing", inbox.WithHooks(h))
//
// Metrics, named like idem's other components (idem_<component>_<what>,
// counters _total, histograms _seconds):
//
//	idem_inbox_messages_total{consumer,outcome}            applied, duplicate, mismatch, invalid, handler_error, error
//	idem_inbox_message_duration_seconds{consumer,outcome}  time to a decision, retries included
//	idem_inbox_retries_total{consumer}                     transactions retried (serialization failures, deadlocks, busy)
//	idem_inbox_swept_total{consumer}                       key rows deleted by Sweep
//	idem_inbox_batch_size{consumer}                        messages per ProcessBatch transaction (histogram)
//	idem_inbox_batch_duration_seconds{consumer}            time per ProcessBatch, retries included
//
// outcome handler_error is the handler's error (nothing recorded, the
// message is redelivered); error is the database's (unreachable, a commit
// whose outcome is unknown, retries exhausted); mismatch is
// a key delivered again with another payload's fingerprint (a producer bug
// surfaced); invalid is a key or argument refused before any I/O. A rising
// duplicate share is redelivery (the inbox doing its job); a rising retries
// rate is contention on the key table.
package inboxprom

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/promconfig"
)

// Outcomes of idem_inbox_messages_total.
const (
	OutcomeApplied   = "applied"
	OutcomeDuplicate = "duplicate"
	OutcomeMismatch  = "mismatch"
	OutcomeInvalid   = "invalid"
	OutcomeHandler   = "handler_error"
	OutcomeError     = "error"
)

// Hooks implements inbox.Hooks with Prometheus collectors.
type Hooks struct {
	messages *prometheus.CounterVec
	duration *prometheus.HistogramVec
	retries  *prometheus.CounterVec
	swept    *prometheus.CounterVec
	batch    *prometheus.HistogramVec
	batchDur *prometheus.HistogramVec
}

var _ inbox.Hooks = (*Hooks)(nil)

// Option configures [New]. An option that cannot apply returns an error
// wrapping idem.ErrInvalidOption, and New returns it.
type Option func(*config) error

type config = promconfig.Config

// WithNamespace sets the first part of every metric's name (default "idem").
func WithNamespace(ns string) Option { return promconfig.Namespace(ns) }

// WithConstLabels adds labels to every metric, to tell several services
// apart in one registry (inboxes are told apart by the consumer label).
func WithConstLabels(l prometheus.Labels) Option {
	return promconfig.ConstLabels(l, "consumer", "outcome")
}

// WithBuckets sets the buckets, in seconds, of the two duration histograms
// (default 100 µs to about 15 min in steps of 2.5×). They must be
// increasing. The batch size histogram keeps its powers of two.
func WithBuckets(b []float64) Option { return promconfig.Buckets(b) }

// New registers the collectors with reg and returns hooks to pass to
// inbox.WithHooks. A nil reg or a bad option is an error wrapping
// idem.ErrInvalidOption. Registering twice with one registry fails (the
// registry's AlreadyRegisteredError): share one Hooks between inboxes, the
// consumer label tells them apart.
func New(reg prometheus.Registerer, opts ...Option) (*Hooks, error) {
	cfg, err := promconfig.New("inboxprom", reg, prometheus.ExponentialBuckets(0.0001, 2.5, 14), opts)
	if err != nil {
		return nil, err
	}
	opt := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: cfg.Namespace, Subsystem: "inbox", Name: name, Help: help, ConstLabels: prometheus.Labels(cfg.Labels)}
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		o := opt(name, help)
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: o.Namespace, Subsystem: o.Subsystem, Name: o.Name, Help: o.Help, ConstLabels: o.ConstLabels, Buckets: buckets,
		}, labels)
	}
	h := &Hooks{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts(opt("messages_total",
			"Messages that reached a decision, by consumer and outcome: applied, duplicate, mismatch, invalid, handler_error, error.")),
			[]string{"consumer", "outcome"}),
		duration: histogram("message_duration_seconds", "Time from Process to its decision, retries included, by consumer and outcome.",
			cfg.Buckets, "consumer", "outcome"),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts(opt("retries_total",
			"Transactions retried after a retryable error (serialization failure, deadlock, busy), by consumer.")), []string{"consumer"}),
		swept: prometheus.NewCounterVec(prometheus.CounterOpts(opt("swept_total",
			"Key rows deleted by Sweep, by consumer.")), []string{"consumer"}),
		batch: histogram("batch_size", "Valid messages per ProcessBatch transaction, by consumer.",
			prometheus.ExponentialBuckets(1, 2, 12), "consumer"),
		batchDur: histogram("batch_duration_seconds", "Time per ProcessBatch transaction, retries included, by consumer.",
			cfg.Buckets, "consumer"),
	}
	if err := promconfig.Register[prometheus.Collector](cfg, reg, h.messages, h.duration, h.retries, h.swept, h.batch, h.batchDur); err != nil {
		return nil, err
	}
	return h, nil
}

// outcome classifies one decision.
func outcome(applied bool, err error) string {
	switch {
	case errors.Is(err, idem.ErrFingerprintMismatch):
		return OutcomeMismatch
	case errors.Is(err, idem.ErrInvalidKey), errors.Is(err, idem.ErrInvalidArgument):
		return OutcomeInvalid
	case errors.As(err, new(*inbox.HandlerError)):
		return OutcomeHandler
	case err != nil:
		return OutcomeError
	case applied:
		return OutcomeApplied
	}
	return OutcomeDuplicate
}

// Processed implements inbox.Hooks. A decision made before any I/O (an
// invalid key) is reported with d == 0 and is counted, not timed.
func (h *Hooks) Processed(consumer string, applied bool, err error, d time.Duration) {
	o := outcome(applied, err)
	h.messages.WithLabelValues(consumer, o).Inc()
	if d > 0 {
		h.duration.WithLabelValues(consumer, o).Observe(d.Seconds())
	}
}

// Retried implements inbox.Hooks.
func (h *Hooks) Retried(consumer string, _ int, _ error) {
	h.retries.WithLabelValues(consumer).Inc()
}

// Swept implements inbox.Hooks.
func (h *Hooks) Swept(consumer string, n int) {
	h.swept.WithLabelValues(consumer).Add(float64(n))
}

// Batch implements inbox.Hooks.
func (h *Hooks) Batch(consumer string, n int, d time.Duration) {
	h.batch.WithLabelValues(consumer).Observe(float64(n))
	h.batchDur.WithLabelValues(consumer).Observe(d.Seconds())
}
