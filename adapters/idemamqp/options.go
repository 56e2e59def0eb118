package idemamqp

import (
	"log/slog"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/idem-go/idem/internal/retry"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Option configures a [Consumer]. Options are validated once, by
// [NewConsumer]; an invalid one is an error wrapping [idem.ErrInvalidOption].
type Option func(*config) error

type config struct {
	consume.Config[amqp.Delivery]
	prefetch    int
	linger      time.Duration
	dlxExchange string
	dlxKey      string
	dlxSet      bool
}

func defaultConfig() config {
	c := config{
		Config:   consume.Defaults[amqp.Delivery]("idemamqp", MessageIDKey),
		prefetch: 200,
		linger:   time.Millisecond,
	}
	c.Backoff = retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	c.System, c.Headers = "rabbitmq", carrier
	return c
}

// confirmTimeout bounds the wait for the broker's confirm of a requeue or
// dead-letter publish; on timeout the delivery is nacked with requeue.
const confirmTimeout = 30 * time.Second

// shared adapts one of the options every adapter shares.
func shared(o consume.Option[amqp.Delivery]) Option {
	return func(c *config) error { return o(&c.Config) }
}

// WithKey sets how a delivery's inbox key is found (default
// [MessageIDKey]). A delivery whose key function fails is dead-lettered
// with [idem.ReasonMissingKey]; one whose key is invalid, with
// [idem.ReasonInvalidKey].
func WithKey(f func(amqp.Delivery) (string, error)) Option { return shared(consume.WithKey(f)) }

// WithPrefetch sets the channel's prefetch count (basic.qos; default 200):
// how many unacked deliveries the broker sends ahead. It must be at least
// the batch size, or groups never fill.
func WithPrefetch(n int) Option {
	return consume.Check("idemamqp", n >= 1 && n <= 65535, func(c *config) { c.prefetch = n }, "prefetch %d not in [1, 65535]", n)
}

// WithFingerprint stores a digest of each delivery with its key (at most
// [idem.MaxFingerprintLen] bytes). A key redelivered with another
// fingerprint is dead-lettered with [idem.ReasonFingerprintMismatch].
func WithFingerprint(f func(amqp.Delivery) []byte) Option { return shared(consume.WithFingerprint(f)) }

// WithLinger sets how long a group waits for one more delivery before it is
// processed (default 1ms; deliveries already received are taken at once).
func WithLinger(d time.Duration) Option {
	return consume.Check("idemamqp", d >= 0 && d <= time.Second, func(c *config) { c.linger = d }, "linger %v not in [0, 1s]", d)
}

// WithSetHandler makes the Consumer apply each group with f: the group's
// keys are recorded with one multi-row insert and f is called once, in the
// same transaction, with the deliveries whose keys were new
// ([inbox.Inbox.ProcessBatchSet]), so a group costs a fixed number of
// statements however many deliveries it holds.
//
// The [Handler] given to [NewConsumer] becomes the fallback: when f fails,
// the transaction is rolled back whole and the group is run again one
// delivery at a time with that Handler, each in its own savepoint, so a
// failing delivery is isolated and requeued with x-idem-attempts + 1 or
// dead-lettered exactly as without WithSetHandler, while the others commit
// and are acked. The Handler may be nil when f is given; then a failing f
// fails the whole group like a failed transaction: nothing is acked, every
// delivery is nacked with requeue after a pause, and no attempt is counted
// (a delivery f can never apply is redelivered until f is fixed). Give a
// Handler wherever such poison messages are possible.
func WithSetHandler(f SetHandler) Option {
	return shared(consume.WithSetHandler(consume.SetHandler[amqp.Delivery](f)))
}

// WithBatchSize sets the most deliveries one inbox transaction commits
// (default 100, at most the prefetch).
func WithBatchSize(n int) Option { return shared(consume.WithBatchSize[amqp.Delivery](n)) }

// WithDeadLetter publishes deliveries that cannot be applied to exchange
// with routingKey (publisher-confirmed), with x-idem-* headers saying why,
// and then acks them. Without it they are rejected without requeue
// (basic.nack requeue=false), which the broker routes to the queue's own
// dead-letter exchange (x-dead-letter-exchange) if it has one, and drops
// otherwise.
func WithDeadLetter(exchange, routingKey string) Option {
	return consume.Check("idemamqp", true, func(c *config) { c.dlxExchange, c.dlxKey, c.dlxSet = exchange, routingKey, true }, "")
}

// WithMaxAttempts sets the attempt (counted in the x-idem-attempts header,
// see the package doc) at which a delivery whose handler still fails is
// dead-lettered with [idem.ReasonMaxAttempts] instead of retried (default
// 5).
func WithMaxAttempts(n int) Option { return shared(consume.WithMaxAttempts[amqp.Delivery](n)) }

// WithTransient makes a Publisher send non-persistent messages (delivery
// mode 1) unless the Publishing sets DeliveryMode; the default is
// persistent (2), which survives a broker restart on a durable queue.
func WithTransient() PublisherOption {
	return consume.Check("idemamqp", true, func(c *publisherConfig) { c.persistent = false }, "")
}

// WithBackoff sets the pause after a failed transaction (the database, not
// a message, at fault) before its deliveries are requeued: drawn between
// min/2 and min·2^(failures-1), at most max (default 50ms, 2s). RabbitMQ
// has no delayed requeue, so a delivery whose handler failed is requeued
// at once, its attempt counted.
func WithBackoff(min, max time.Duration) Option {
	return shared(consume.WithBackoff[amqp.Delivery](min, max))
}

// PublisherOption configures a [Publisher]; it is validated once, by
// [NewPublisher].
type PublisherOption func(*publisherConfig) error

type publisherConfig struct {
	persistent bool
}

// WithObserver calls f once for every delivery the Consumer settles, from
// Run's goroutine, after the ack, requeue or dead letter. f must not block.
func WithObserver(f func(Event)) Option { return shared(consume.WithObserver(f)) }

// Event reports one settled delivery to [WithObserver].
type Event = idem.DeliveryEvent[amqp.Delivery]

// WithLogger logs retries, dead letters and errors to l (default:
// discarded).
func WithLogger(l *slog.Logger) Option { return shared(consume.WithLogger[amqp.Delivery](l)) }

// WithTracer traces the consume loop through t (idemotel.NewTracer for
// OpenTelemetry): a span per group (idem.OpConsumeBatch), whose context the
// inbox transaction runs in, and a span per delivery (idem.OpConsume),
// child of the group's, linked to the trace context in the delivery's
// string headers, ended with its outcome once it is acked, requeued or
// dead-lettered.
func WithTracer(t idem.Tracer) Option { return shared(consume.WithTracer[amqp.Delivery](t)) }
