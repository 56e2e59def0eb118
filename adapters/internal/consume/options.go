package consume

import (
	"log/slog"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/option"
	"github.com/idem-go/idem/internal/retry"
)

// Option sets one shared field of a [Config]; each adapter's option of the
// same name wraps it. Its error wraps [idem.ErrInvalidOption].
type Option[T any] func(*Config[T]) error

// Apply runs opts over cfg in order, the way every adapter's constructor
// validates its options once: it is [option.Apply], a nil option or a
// failing one being an error wrapping [idem.ErrInvalidOption] named after
// the adapter.
func Apply[C any, O ~func(*C) error](name string, cfg *C, opts []O) error {
	return option.Apply(name, cfg, opts)
}

// Check is the shape of an adapter's own option, [option.Check]: it sets a
// field with set when ok, and otherwise fails with the problem that format
// and args describe, prefixed with the adapter's name and wrapping
// [idem.ErrInvalidOption].
func Check[C any](name string, ok bool, set func(*C), format string, args ...any) func(*C) error {
	return option.Check(name, ok, set, format, args...)
}

// check is Check for the shared options, named after the adapter whose
// Config they are applied to.
func check[T any](ok bool, set func(*Config[T]), format string, args ...any) Option[T] {
	return func(c *Config[T]) error { return option.Check(c.Name, ok, set, format, args...)(c) }
}

// WithKey derives each message's idempotency key with f. The key must be
// stable across redeliveries and producer retries: derive it from the
// message (an id header, business fields through [idem.DeriveKey]), never
// from the delivery. A message whose f fails is dead-lettered with
// [idem.ReasonMissingKey]; one whose key fails [idem.ValidateKey], with
// [idem.ReasonInvalidKey].
func WithKey[T any](f func(T) (string, error)) Option[T] {
	return check(f != nil, func(c *Config[T]) { c.Key = f }, "nil key function")
}

// WithFingerprint stores f(msg), a digest of the payload of at most
// [idem.MaxFingerprintLen] bytes, with each key. A key that arrives again
// with another fingerprint is dead-lettered with
// [idem.ReasonFingerprintMismatch]; an oversized fingerprint, with
// [idem.ReasonInvalidFingerprint].
func WithFingerprint[T any](f func(T) []byte) Option[T] {
	return check(f != nil, func(c *Config[T]) { c.Fingerprint = f }, "nil fingerprint function")
}

// WithSetHandler applies each batch's new messages with one call of f (see
// [SetHandler]).
func WithSetHandler[T any](f SetHandler[T]) Option[T] {
	return check(f != nil, func(c *Config[T]) { c.Set = f }, "nil set handler")
}

// WithBatchSize bounds the messages one transaction commits (1 to 10000).
func WithBatchSize[T any](n int) Option[T] {
	return check(n >= 1 && n <= 10000, func(c *Config[T]) { c.BatchSize = n }, "batch size %d not in [1, 10000]", n)
}

// WithMaxAttempts sets the attempt (1 to 1000) at which a message whose
// handler still fails is dead-lettered with [idem.ReasonMaxAttempts]
// instead of retried: n deliveries in all.
func WithMaxAttempts[T any](n int) Option[T] {
	return check(n >= 1 && n <= 1000, func(c *Config[T]) { c.MaxAttempts = n }, "max attempts %d not in [1, 1000]", n)
}

// WithBackoff sets the delay before a failed message is retried: drawn
// between min/2 and min·2^(attempt-1), at most max (full jitter).
func WithBackoff[T any](min, max time.Duration) Option[T] {
	b := retry.Backoff{Min: min, Max: max}
	err := b.Validate()
	return check(err == nil, func(c *Config[T]) { c.Backoff = b }, "%v", err)
}

// WithObserver calls f once for every settled message, from the goroutine
// that settled it, after the ack, retry or dead letter. f must not block.
func WithObserver[T any](f func(idem.DeliveryEvent[T])) Option[T] {
	return check(f != nil, func(c *Config[T]) { c.Observer = f }, "nil observer")
}

// WithLogger logs retries, dead letters and transport errors to l (default:
// discarded).
func WithLogger[T any](l *slog.Logger) Option[T] {
	return check(l != nil, func(c *Config[T]) { c.Logger = l }, "nil logger")
}

// WithTracer traces batches and messages through t (see the package
// documentation for the spans). Without it nothing is traced, at no cost.
func WithTracer[T any](t idem.Tracer) Option[T] {
	return check(t != nil, func(c *Config[T]) { c.Tracer = t }, "nil tracer")
}
