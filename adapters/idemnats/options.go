package idemnats

import (
	"log/slog"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/idem-go/idem/internal/retry"
	"github.com/nats-io/nats.go/jetstream"
)

// Option configures a [Consumer]. Options are validated once, by
// [NewConsumer]; an invalid one is an error wrapping [idem.ErrInvalidOption].
type Option func(*config) error

type config struct {
	consume.Config[jetstream.Msg]
	maxWait    time.Duration
	linger     time.Duration
	dlqJS      jetstream.JetStream
	dlqSubject string
	doubleAck  bool
}

func defaultConfig() config {
	c := config{
		Config:  consume.Defaults[jetstream.Msg]("idemnats", MsgIDKey),
		maxWait: 5 * time.Second,
		linger:  time.Millisecond,
	}
	c.System, c.Headers = "nats", carrier
	return c
}

// pullBackoff spaces the retries of a failing pull.
var pullBackoff = retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}

// shared adapts one of the options every adapter shares.
func shared(o consume.Option[jetstream.Msg]) Option {
	return func(c *config) error { return o(&c.Config) }
}

// WithKey sets how a message's inbox key is found (default [MsgIDKey], the
// Nats-Msg-Id header). A key must be stable across redeliveries and
// producer retries: derive it from the message, never from the delivery. A
// message whose key function fails is dead-lettered with
// [idem.ReasonMissingKey]; one whose key is invalid (empty, over 255 bytes),
// with [idem.ReasonInvalidKey].
func WithKey(f func(jetstream.Msg) (string, error)) Option { return shared(consume.WithKey(f)) }

// WithFingerprint stores a digest of each message with its key (at most
// [idem.MaxFingerprintLen] bytes; pass a hash). A redelivered key with
// another fingerprint is a producer bug: the message is dead-lettered with
// [idem.ReasonFingerprintMismatch].
func WithFingerprint(f func(jetstream.Msg) []byte) Option { return shared(consume.WithFingerprint(f)) }

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
	return shared(consume.WithSetHandler(consume.SetHandler[jetstream.Msg](f)))
}

// WithBatchSize sets the most messages one inbox transaction commits
// (default 100, 1 to 10000); the client buffers twice as many.
func WithBatchSize(n int) Option { return shared(consume.WithBatchSize[jetstream.Msg](n)) }

// WithMaxAttempts sets the delivery (the message's NumDelivered) at which a
// message whose handler still fails is dead-lettered with
// [idem.ReasonMaxAttempts] instead of redelivered (default 5). Keep the
// JetStream consumer's own MaxDeliver unlimited (-1) or above n, or the
// server stops redelivering first and the message is never dead-lettered.
func WithMaxAttempts(n int) Option { return shared(consume.WithMaxAttempts[jetstream.Msg](n)) }

// WithBackoff sets the redelivery delay after a failure (NakWithDelay):
// drawn between min/2 and min·2^(deliveries-1), at most max (default 1s,
// 30s).
func WithBackoff(min, max time.Duration) Option {
	return shared(consume.WithBackoff[jetstream.Msg](min, max))
}

// WithObserver calls f once for every message the Consumer settles, from
// the goroutine that runs Run, after the ack, nak or dead letter. f must
// not block.
func WithObserver(f func(Event)) Option { return shared(consume.WithObserver(f)) }

// WithLogger logs retries, dead letters and transient errors to l (default:
// discarded).
func WithLogger(l *slog.Logger) Option { return shared(consume.WithLogger[jetstream.Msg](l)) }

// WithTracer traces the consume loop through t (idemotel.NewTracer for
// OpenTelemetry): a span per pulled group (idem.OpConsumeBatch), whose
// context the inbox transaction runs in, and a span per message
// (idem.OpConsume), child of the group's, linked to the trace context in
// the message's headers, ended with its outcome once it is acked, nak'd or
// dead-lettered.
func WithTracer(t idem.Tracer) Option { return shared(consume.WithTracer[jetstream.Msg](t)) }

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
	return consume.Check("idemnats", js != nil && subject != "", func(c *config) { c.dlqJS, c.dlqSubject = js, subject },
		"dead letter needs a JetStream and a subject")
}

// WithMaxWait sets how long one pull request waits on the server before it
// is renewed (default 5s, at least 1s). Cancelling Run's context ends Run at
// once whatever this is.
func WithMaxWait(d time.Duration) Option {
	return consume.Check("idemnats", d >= time.Second, func(c *config) { c.maxWait = d }, "max wait %v below 1s", d)
}

// WithLinger sets how long a group waits for one more message before it is
// processed (default 1ms). Messages already buffered are taken at once; the
// linger only matters when the stream runs dry mid-group.
func WithLinger(d time.Duration) Option {
	return consume.Check("idemnats", d > 0 && d <= time.Second, func(c *config) { c.linger = d }, "linger %v not in (0, 1s]", d)
}

// WithDoubleAck makes every ack wait for the server's confirmation
// (Msg.DoubleAck), one round trip per message. Without it an ack is sent
// and not confirmed; if it is lost the message is redelivered after the
// consumer's AckWait and the inbox reports it as a duplicate, so a lost ack
// costs a redelivery, never a second effect.
func WithDoubleAck() Option {
	return consume.Check("idemnats", true, func(c *config) { c.doubleAck = true }, "")
}

// PublisherOption configures a [Publisher]; it is validated once, by
// [NewPublisher], and an invalid one is an error wrapping
// [idem.ErrInvalidOption].
type PublisherOption func(*publisherConfig) error

type publisherConfig struct {
	retries int
	wait    time.Duration
	timeout time.Duration
}

// WithPublishRetries makes a Publisher retry a publish that got no PubAck (a
// timeout, no responders) up to n more times, wait apart, with the same
// Nats-Msg-Id, so the stream's duplicate window drops the copy if the first
// attempt was stored (default 3, 250ms). The window (stream Duplicates,
// default 2 minutes) must be longer than all the attempts together.
func WithPublishRetries(n int, wait time.Duration) PublisherOption {
	return consume.Check("idemnats", n >= 0 && wait >= 0, func(c *publisherConfig) { c.retries, c.wait = n, wait },
		"retries %d, wait %v", n, wait)
}

// WithPublishTimeout bounds each publish attempt's wait for its PubAck
// (default 5s) within the caller's context; an attempt that runs out is
// retried (see [WithPublishRetries]).
func WithPublishTimeout(d time.Duration) PublisherOption {
	return consume.Check("idemnats", d > 0, func(c *publisherConfig) { c.timeout = d }, "publish timeout %v", d)
}

// Event reports one settled message to [WithObserver].
type Event = idem.DeliveryEvent[jetstream.Msg]
