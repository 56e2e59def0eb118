// Package consume is the one delivery core under idem's broker adapters
// (idemkafka, idemnats, idemamqp, idemwatermill). A transport fetches
// messages of its broker type T, wraps each in a [Delivery] with its attempt
// number, and hands a batch to [Inbox.Process]; the core derives and
// validates each key and fingerprint, runs the batch through the inbox in
// one transaction (with the user's per-message [Handler] or [SetHandler],
// typed T, never boxed), and returns one [Decision] per delivery: ack it
// (Applied, Duplicate), retry it after a delay (Retried), or dead-letter it
// with an [idem.Reason]. The transport performs the decision on its broker
// and then calls [Config.Report], which logs and calls the observer.
//
// A transport whose effects live outside the database (Kafka's key store
// mode, the Watermill key store middleware) uses the same rules without the
// inbox: [Config.Prepare] for the key and fingerprint, [Config.Decide] for
// the decision after its own call, and [Config.Report].
//
// Every adapter configures the shared part with the same option vocabulary
// ([WithKey], [WithFingerprint], [WithSetHandler], [WithBatchSize],
// [WithMaxAttempts], [WithBackoff], [WithObserver], [WithLogger],
// [WithTracer]), which its own options wrap one-to-one.
//
// With a Tracer, [Inbox.Process] wraps each batch in an [idem.OpConsumeBatch]
// span, whose context the inbox call gets, and each message in an
// [idem.OpConsume] span, child of the batch's, linked to the producer's
// trace context in the message's headers and ended by [Config.Report] with
// the decision. The Prepare/Decide/Report path begins the same spans with
// [Config.StartBatch] and [Config.Start].
package consume

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/retry"
)

// Delivery is one message of broker type T on its way through the core.
// The transport sets Msg and Attempt; [Config.Prepare] sets Key and
// Fingerprint.
type Delivery[T any] struct {
	// Msg is the broker's message, handed to the handlers as it is.
	Msg T
	// Attempt counts this message's deliveries or runs, 1 for the first
	// (NATS: NumDelivered; AMQP: the x-idem-attempts header plus one;
	// Kafka: the in-process run).
	Attempt int
	// Key is the idempotency key, once derived.
	Key string
	// Fingerprint is the payload digest, once derived (nil: not checked).
	Fingerprint []byte
	// span is the message's open span, from [Config.Start] (nil: none).
	span idem.Span
}

// Decision is what the transport must do with one delivery.
type Decision struct {
	// Outcome is the action: Applied and Duplicate mean acknowledge,
	// Retried means redeliver (or run again) after After, DeadLettered
	// means copy to the dead-letter target and remove.
	Outcome idem.Outcome
	// Reason is set for DeadLettered.
	Reason idem.Reason
	// Err is the cause, for Retried and DeadLettered.
	Err error
	// After is the delay before the retry, for Retried: a jittered
	// exponential backoff over the attempt number.
	After time.Duration
}

// Ack reports whether the decision is to acknowledge the delivery (it was
// applied now or before).
func (d Decision) Ack() bool { return d.Outcome == idem.Applied || d.Outcome == idem.Duplicate }

// Config is the part of an adapter's configuration that the core reads. An
// adapter embeds it in its own config, fills in its defaults, and applies
// the shared options to it.
type Config[T any] struct {
	// Name prefixes log messages and option errors ("idemnats").
	Name string
	// Key derives a message's key; its error means the message has none.
	Key func(T) (string, error)
	// Fingerprint derives a message's payload digest (optional).
	Fingerprint func(T) []byte
	// Set is the set handler (optional; see [WithSetHandler]).
	Set SetHandler[T]
	// BatchSize bounds the messages of one transaction.
	BatchSize int
	// MaxAttempts is the attempt at which a failing message is
	// dead-lettered instead of retried.
	MaxAttempts int
	// Backoff spaces the retries of a failing message.
	Backoff retry.Backoff
	// Observer, if set, is called once per settled message.
	Observer func(idem.DeliveryEvent[T])
	// Logger receives retries and dead letters (never nil once
	// [Defaults] has run).
	Logger *slog.Logger
	// Tracer, if set, traces each batch and message (see [WithTracer]).
	Tracer idem.Tracer
	// System names the broker on spans ([idem.AttrSystem]): "kafka",
	// "nats", "rabbitmq", "watermill".
	System string
	// Headers returns a message's headers, to link its span to the
	// producer's trace context (optional; called only with a Tracer).
	Headers func(T) idem.Carrier
}

// Defaults returns a Config named name with key function key and idem's
// common defaults: batches of 100, 5 attempts, a backoff from 1s to 30s, no
// observer, a discarding logger. Adapters change what differs for their
// broker before applying the user's options.
func Defaults[T any](name string, key func(T) (string, error)) Config[T] {
	return Config[T]{
		Name:        name,
		Key:         key,
		BatchSize:   100,
		MaxAttempts: 5,
		Backoff:     retry.Backoff{Min: time.Second, Max: 30 * time.Second},
		Logger:      slog.New(slog.DiscardHandler),
	}
}

// Invalid returns an option error of the shape every adapter uses:
// "<name>: <problem>: idem: invalid option".
func (c *Config[T]) Invalid(format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", c.Name, fmt.Sprintf(format, args...), idem.ErrInvalidOption)
}

// Prepare derives d's key and fingerprint and checks them. When it returns
// false, the message can never be applied and the Decision dead-letters it
// (ReasonMissingKey, ReasonInvalidKey or ReasonInvalidFingerprint).
func (c *Config[T]) Prepare(d *Delivery[T]) (Decision, bool) {
	key, err := c.Key(d.Msg)
	if err != nil {
		if !errors.Is(err, idem.ErrMissingKey) {
			err = fmt.Errorf("%s: key: %w: %w", c.Name, idem.ErrMissingKey, err)
		}
		return Decision{Outcome: idem.DeadLettered, Reason: idem.ReasonMissingKey, Err: err}, false
	}
	d.Key = key
	if err := idem.ValidateKey(key); err != nil {
		return Decision{Outcome: idem.DeadLettered, Reason: idem.ReasonInvalidKey, Err: fmt.Errorf("%s: %w", c.Name, err)}, false
	}
	if c.Fingerprint != nil {
		d.Fingerprint = c.Fingerprint(d.Msg)
		if err := idem.ValidateFingerprint(d.Fingerprint); err != nil {
			return Decision{Outcome: idem.DeadLettered, Reason: idem.ReasonInvalidFingerprint, Err: fmt.Errorf("%s: %w", c.Name, err)}, false
		}
	}
	return Decision{}, true
}

// Decide is idem's one rule for a processed message: applied or duplicate
// (err nil) is acknowledged; a fingerprint mismatch, an error marked
// [idem.Permanent], and a failure at the last allowed attempt are
// dead-lettered; any other failure is retried after the backoff of its
// attempt.
func (c *Config[T]) Decide(d *Delivery[T], applied bool, err error) Decision {
	switch {
	case err == nil && applied:
		return Decision{Outcome: idem.Applied}
	case err == nil:
		return Decision{Outcome: idem.Duplicate}
	case errors.Is(err, idem.ErrFingerprintMismatch):
		return Decision{Outcome: idem.DeadLettered, Reason: idem.ReasonFingerprintMismatch, Err: err}
	case idem.IsPermanent(err):
		return Decision{Outcome: idem.DeadLettered, Reason: idem.ReasonPermanent, Err: err}
	case d.Attempt >= c.MaxAttempts:
		return Decision{Outcome: idem.DeadLettered, Reason: idem.ReasonMaxAttempts, Err: err}
	}
	return c.Retry(d, err)
}

// Retry is the decision to run d again after the backoff of its attempt,
// whatever the attempt count: for a failure that is not the message's
// fault (a failed transaction).
func (c *Config[T]) Retry(d *Delivery[T], err error) Decision {
	return Decision{Outcome: idem.Retried, Err: err, After: c.Backoff.Delay(max(d.Attempt, 1) - 1)}
}

// Report logs a settled delivery, ends its span (if [Config.Start] began
// one) with dec's outcome and error, and calls the observer. The transport
// calls it once it has performed dec (acked, redelivered, dead-lettered),
// from the goroutine that settled it.
func (c *Config[T]) Report(d *Delivery[T], dec Decision) {
	if d.span != nil {
		c.end(d, dec.Outcome.String(), dec.Err)
	}
	switch dec.Outcome {
	case idem.Retried:
		c.Logger.Info(c.Name+": message failed; retrying", "key", d.Key, "attempt", d.Attempt, "in", dec.After, "err", dec.Err)
	case idem.DeadLettered:
		c.Logger.Error(c.Name+": message dead-lettered", "key", d.Key, "reason", string(dec.Reason), "attempt", d.Attempt, "err", dec.Err)
	}
	if c.Observer != nil {
		c.Observer(idem.DeliveryEvent[T]{Msg: d.Msg, Key: d.Key, Attempt: d.Attempt, Outcome: dec.Outcome, Reason: dec.Reason, Err: dec.Err})
	}
}
