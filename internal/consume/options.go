package consume

import (
	"log/slog"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/retry"
)

// Option sets one shared field of a [Config]; each adapter's option of the
// same name wraps it. Its error wraps [idem.ErrInvalidOption].
type Option[T any] func(*Config[T]) error

// Apply runs opts over cfg in order, the way every adapter's constructor
// validates its options once: a nil option or a failing one is an error
// wrapping [idem.ErrInvalidOption] named after the adapter.
func Apply[C any, O ~func(*C) error](name string, cfg *C, opts []O) error {
	for _, o := range opts {
		if o == nil {
			return (&Config[struct{}]{Name: name}).Invalid("nil option")
		}
		if err := o(cfg); err != nil {
			return err
		}
	}
	return nil
}

// WithKey derives each message's idempotency key with f. The key must be
// stable across redeliveries and producer retries: derive it from the
// message (an id header, business fields through [idem.DeriveKey]), never
// from the delivery. A message whose f fails is dead-lettered with
// [idem.ReasonMissingKey]; one whose key fails [idem.ValidateKey], with
// [idem.ReasonInvalidKey].
func WithKey[T any](f func(T) (string, error)) Option[T] {
	return func(c *Config[T]) error {
		if f == nil {
			return c.Invalid("nil key function")
		}
		c.Key = f
		return nil
	}
}

// WithFingerprint stores f(msg), a digest of the payload of at most
// [idem.MaxFingerprintLen] bytes, with each key. A key that arrives again
// with another fingerprint is dead-lettered with
// [idem.ReasonFingerprintMismatch]; an oversized fingerprint, with
// [idem.ReasonInvalidFingerprint].
func WithFingerprint[T any](f func(T) []byte) Option[T] {
	return func(c *Config[T]) error {
		if f == nil {
			return c.Invalid("nil fingerprint function")
		}
		c.Fingerprint = f
		return nil
	}
}

// WithSetHandler applies each batch's new messages with one call of f (see
// [SetHandler]).
func WithSetHandler[T any](f SetHandler[T]) Option[T] {
	return func(c *Config[T]) error {
		if f == nil {
			return c.Invalid("nil set handler")
		}
		c.Set = f
		return nil
	}
}

// WithBatchSize bounds the messages one transaction commits (1 to 10000).
func WithBatchSize[T any](n int) Option[T] {
	return func(c *Config[T]) error {
		if n < 1 || n > 10000 {
			return c.Invalid("batch size %d not in [1, 10000]", n)
		}
		c.BatchSize = n
		return nil
	}
}

// WithMaxAttempts sets the attempt (1 to 1000) at which a message whose
// handler still fails is dead-lettered with [idem.ReasonMaxAttempts]
// instead of retried: n deliveries in all.
func WithMaxAttempts[T any](n int) Option[T] {
	return func(c *Config[T]) error {
		if n < 1 || n > 1000 {
			return c.Invalid("max attempts %d not in [1, 1000]", n)
		}
		c.MaxAttempts = n
		return nil
	}
}

// WithBackoff sets the delay before a failed message is retried: drawn
// between min/2 and min·2^(attempt-1), at most max (full jitter).
func WithBackoff[T any](min, max time.Duration) Option[T] {
	return func(c *Config[T]) error {
		b := retry.Backoff{Min: min, Max: max}
		if err := b.Validate(); err != nil {
			return c.Invalid("%v", err)
		}
		c.Backoff = b
		return nil
	}
}

// WithObserver calls f once for every settled message, from the goroutine
// that settled it, after the ack, retry or dead letter. f must not block.
func WithObserver[T any](f func(idem.DeliveryEvent[T])) Option[T] {
	return func(c *Config[T]) error {
		if f == nil {
			return c.Invalid("nil observer")
		}
		c.Observer = f
		return nil
	}
}

// WithLogger logs retries, dead letters and transport errors to l (default:
// discarded).
func WithLogger[T any](l *slog.Logger) Option[T] {
	return func(c *Config[T]) error {
		if l == nil {
			return c.Invalid("nil logger")
		}
		c.Logger = l
		return nil
	}
}
