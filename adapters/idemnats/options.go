package idemnats

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/idem-go/idem"
	"github.com/nats-io/nats.go/jetstream"
)

// Option configures a [Consumer] or a [Publisher]. Options are validated
// once, by [NewConsumer] or [NewPublisher]; an invalid option, or one that
// does not apply to what is being built, is an error wrapping
// [idem.ErrInvalidOption].
type Option func(*config) error

type target int

const (
	forConsumer target = iota + 1
	forPublisher
)

type config struct {
	target target

	// consumer
	batch         int
	maxWait       time.Duration
	linger        time.Duration
	maxDeliveries uint64
	retryMin      time.Duration
	retryMax      time.Duration
	key           func(jetstream.Msg) (string, error)
	fingerprint   func(jetstream.Msg) []byte
	dlqJS         jetstream.JetStream
	dlqSubject    string
	doubleAck     bool
	observer      func(Event)
	set           SetHandler

	// publisher
	retries        int
	retryWait      time.Duration
	attemptTimeout time.Duration

	// both
	logger *slog.Logger
}

func defaultConfig(t target) config {
	return config{
		target:         t,
		batch:          100,
		maxWait:        5 * time.Second,
		linger:         time.Millisecond,
		maxDeliveries:  5,
		retryMin:       time.Second,
		retryMax:       30 * time.Second,
		key:            MsgIDKey,
		retries:        3,
		retryWait:      250 * time.Millisecond,
		attemptTimeout: 5 * time.Second,
		logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("idemnats: %w: "+format, append([]any{idem.ErrInvalidOption}, args...)...)
}

func (c *config) only(t target, name string) error {
	if c.target != t {
		what := "Consumer"
		if t == forPublisher {
			what = "Publisher"
		}
		return invalid("%s applies to a %s only", name, what)
	}
	return nil
}

// WithBatchSize sets the most messages one inbox transaction commits
// (default 100, 1 to 10000); the client buffers twice as many.
func WithBatchSize(n int) Option {
	return func(c *config) error {
		if err := c.only(forConsumer, "WithBatchSize"); err != nil {
			return err
		}
		if n < 1 || n > 10000 {
			return invalid("batch size %d not in [1, 10000]", n)
		}
		c.batch = n
		return nil
	}
}

// WithMaxWait sets how long one pull request waits on the server before it
// is renewed (default 5s, at least 1s). Cancelling Run's context ends Run at
// once whatever this is.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) error {
		if err := c.only(forConsumer, "WithMaxWait"); err != nil {
			return err
		}
		if d < time.Second {
			return invalid("max wait %v below 1s", d)
		}
		c.maxWait = d
		return nil
	}
}

// WithLinger sets how long a group waits for one more message before it is
// processed (default 1ms). Messages already buffered are taken at once; the
// linger only matters when the stream runs dry mid-group.
func WithLinger(d time.Duration) Option {
	return func(c *config) error {
		if err := c.only(forConsumer, "WithLinger"); err != nil {
			return err
		}
		if d <= 0 || d > time.Second {
			return invalid("linger %v not in (0, 1s]", d)
		}
		c.linger = d
		return nil
	}
}

// WithMaxDeliveries sets the delivery count (the message's NumDelivered) at
// which a message whose handler still fails is dead-lettered instead of
// redelivered (default 5). Keep the JetStream consumer's own MaxDeliver
// unlimited (-1) or above n, or the server stops redelivering first and the
// message is never dead-lettered.
func WithMaxDeliveries(n int) Option {
	return func(c *config) error {
		if err := c.only(forConsumer, "WithMaxDeliveries"); err != nil {
			return err
		}
		if n < 1 {
			return invalid("max deliveries %d below 1", n)
		}
		c.maxDeliveries = uint64(n)
		return nil
	}
}

// WithRetryDelay sets the redelivery delay after a failure: min after the
// first delivery, doubling with each delivery, at most max (default 1s, 30s).
func WithRetryDelay(min, max time.Duration) Option {
	return func(c *config) error {
		if err := c.only(forConsumer, "WithRetryDelay"); err != nil {
			return err
		}
		if min < 0 || max < min {
			return invalid("retry delay [%v, %v] is not a range", min, max)
		}
		c.retryMin, c.retryMax = min, max
		return nil
	}
}

// WithKey sets how a message's inbox key is found (default [MsgIDKey], the
// Nats-Msg-Id header). A key must be stable across redeliveries and
// producer retries: derive it from the message, never from the delivery. A
// message whose key function fails or returns an invalid key (empty, over
// 255 bytes) is dead-lettered with [ReasonNoKey].
func WithKey(f func(jetstream.Msg) (string, error)) Option {
	return func(c *config) error {
		if err := c.only(forConsumer, "WithKey"); err != nil {
			return err
		}
		if f == nil {
			return invalid("nil key function")
		}
		c.key = f
		return nil
	}
}

// WithFingerprint stores a digest of each message with its key (at most 64
// bytes; pass a hash). A redelivered key with another fingerprint is a
// producer bug: the message is dead-lettered with [ReasonFingerprint].
func WithFingerprint(f func(jetstream.Msg) []byte) Option {
	return func(c *config) error {
		if err := c.only(forConsumer, "WithFingerprint"); err != nil {
			return err
		}
		if f == nil {
			return invalid("nil fingerprint function")
		}
		c.fingerprint = f
		return nil
	}
}

// WithDeadLetter republishes messages that cannot be applied to subject
// through js (which must reach a stream that captures it), with the
// original headers and data and Idem-* headers saying why, and then
// terminates them. The republish carries Nats-Msg-Id
// "dlq:<stream>:<stream sequence>", so a crash between it and the Term
// leaves one copy in a stream whose duplicate window covers the
// redelivery. Without a dead letter, such messages are terminated
// (TermWithReason) and logged: they stay in a limits-retention stream, and
// the server publishes a MSG_TERMINATED advisory.
func WithDeadLetter(js jetstream.JetStream, subject string) Option {
	return func(c *config) error {
		if err := c.only(forConsumer, "WithDeadLetter"); err != nil {
			return err
		}
		if js == nil || subject == "" {
			return invalid("dead letter needs a JetStream and a subject")
		}
		c.dlqJS, c.dlqSubject = js, subject
		return nil
	}
}

// WithDoubleAck makes every ack wait for the server's confirmation
// (Msg.DoubleAck), one round trip per message. Without it an ack is sent
// and not confirmed; if it is lost the message is redelivered after the
// consumer's AckWait and the inbox reports it as a duplicate, so a lost ack
// costs a redelivery, never a second effect.
func WithDoubleAck() Option {
	return func(c *config) error {
		if err := c.only(forConsumer, "WithDoubleAck"); err != nil {
			return err
		}
		c.doubleAck = true
		return nil
	}
}

// WithObserver calls f once for every message the Consumer settles, from
// the goroutine that runs Run, after the ack, nak or dead letter. f must
// not block.
func WithObserver(f func(Event)) Option {
	return func(c *config) error {
		if err := c.only(forConsumer, "WithObserver"); err != nil {
			return err
		}
		if f == nil {
			return invalid("nil observer")
		}
		c.observer = f
		return nil
	}
}

// WithSetHandler makes the Consumer apply each group with f: the group's
// keys are recorded with one multi-row insert and f is called once, in the
// same transaction, with the messages whose keys were new
// ([inbox.Inbox.ProcessBatchSet]), so a group costs a fixed number of
// statements however many messages it holds.
//
// The [Handler] given to [NewConsumer] becomes the fallback: when f fails,
// the transaction is rolled back whole and the group is run again one
// message at a time with that Handler, each in its own savepoint, so a
// failing message is isolated and nak'd, retried and dead-lettered exactly
// as without WithSetHandler, while the others commit and are acked. The
// Handler may be nil when f is given; then a failing f fails the whole group
// like a failed transaction: nothing is acked, every message is nak'd with a
// delay, and none is dead-lettered for it (a message f can never apply is
// redelivered until f is fixed). Give a Handler wherever such poison
// messages are possible.
func WithSetHandler(f SetHandler) Option {
	return func(c *config) error {
		if err := c.only(forConsumer, "WithSetHandler"); err != nil {
			return err
		}
		if f == nil {
			return invalid("nil set handler")
		}
		c.set = f
		return nil
	}
}

// WithRetries makes a Publisher retry a publish that got no PubAck (a
// timeout, no responders) up to n more times, wait apart, with the same
// Nats-Msg-Id, so the stream's duplicate window drops the copy if the first
// attempt was stored (default 3, 250ms). The window (stream Duplicates,
// default 2 minutes) must be longer than all the attempts together.
func WithRetries(n int, wait time.Duration) Option {
	return func(c *config) error {
		if err := c.only(forPublisher, "WithRetries"); err != nil {
			return err
		}
		if n < 0 || wait < 0 {
			return invalid("retries %d, wait %v", n, wait)
		}
		c.retries, c.retryWait = n, wait
		return nil
	}
}

// WithAttemptTimeout bounds each publish attempt's wait for its PubAck
// (default 5s) within the caller's context.
func WithAttemptTimeout(d time.Duration) Option {
	return func(c *config) error {
		if err := c.only(forPublisher, "WithAttemptTimeout"); err != nil {
			return err
		}
		if d <= 0 {
			return invalid("attempt timeout %v", d)
		}
		c.attemptTimeout = d
		return nil
	}
}

// WithLogger logs retries, dead letters and transient errors to l (default:
// discarded).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return invalid("nil logger")
		}
		c.logger = l
		return nil
	}
}
