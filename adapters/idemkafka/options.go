package idemkafka

import (
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/internal/consume"
	"github.com/idem-go/idem/internal/retry"
	"github.com/idem-go/idem/keystore"
)

// Defaults of the consumers.
const (
	DefaultMaxAttempts  = 4 // handler runs of one record before it is dead-lettered
	DefaultBackoffMin   = 100 * time.Millisecond
	DefaultBackoffMax   = 5 * time.Second
	DefaultBatchSize    = 1000 // records per poll
	DefaultOffsetsTable = "idem_kafka_offsets"
)

// MissingKeyPolicy says what a consumer does with a record whose key cannot be
// derived.
type MissingKeyPolicy int

const (
	// DeadLetterMissing sends the record to the dead-letter topic with
	// reason idem.ReasonMissingKey (idem.ReasonInvalidKey for an invalid
	// key) and moves on (the default). Without a
	// dead-letter topic it behaves like StopOnMissing.
	DeadLetterMissing MissingKeyPolicy = iota + 1
	// StopOnMissing makes Run return an error wrapping idem.ErrMissingKey
	// (or idem.ErrInvalidKey);
	// the record's offset is not committed, so it is seen again after a
	// restart.
	StopOnMissing
)

// Option configures a [Consumer], [OffsetConsumer], [KeystoreConsumer] or
// [TransactConsumer]. Options are validated once, by the constructor, whose
// errors wrap idem.ErrInvalidOption; an option that does not apply to what
// is being built (each option's doc says where it applies) is such an error
// too.
type Option func(*config) error

// optKind marks the options that only some consumers take.
type optKind uint8

const (
	optKey optKind = 1 << iota
	optFingerprint
	optMissingKey
	optSetHandler
	optOffsetsTable
	optKeystore
)

// optNames names each restricted option in "does not apply" errors.
var optNames = []struct {
	k    optKind
	name string
}{
	{optKey, "WithKey"},
	{optFingerprint, "WithFingerprint"},
	{optMissingKey, "WithMissingKey"},
	{optSetHandler, "WithSetHandler"},
	{optOffsetsTable, "WithOffsetsTable"},
	{optKeystore, "WithKeystoreOptions"},
}

type config struct {
	consume.Config[*kgo.Record]
	given   optKind // restricted options given
	missing MissingKeyPolicy
	dlq     string
	table   string
	doOpts  []keystore.Option
}

// newConfig applies opts over the defaults and refuses options outside
// allowed, naming the constructor ctor.
func newConfig(opts []Option, allowed optKind, ctor string) (config, error) {
	c := config{
		Config:  consume.Defaults[*kgo.Record]("idemkafka", HeaderKey(HeaderID)),
		missing: DeadLetterMissing,
		table:   DefaultOffsetsTable,
	}
	c.BatchSize, c.MaxAttempts = DefaultBatchSize, DefaultMaxAttempts
	c.System, c.Headers = "kafka", carrier
	c.Backoff = retry.Backoff{Min: DefaultBackoffMin, Max: DefaultBackoffMax}
	if err := consume.Apply("idemkafka", &c, opts); err != nil {
		return config{}, err
	}
	for _, n := range optNames {
		if c.given&n.k != 0 && allowed&n.k == 0 {
			return config{}, invalid("%s does not apply to %s", n.name, ctor)
		}
	}
	return c, nil
}

// shared wraps one of the options every adapter shares; kind marks it when
// only some consumers take it.
func shared(o consume.Option[*kgo.Record], kind optKind) Option {
	return func(c *config) error {
		c.given |= kind
		return o(&c.Config)
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("idemkafka: %s: %w", fmt.Sprintf(format, args...), idem.ErrInvalidOption)
}

// WithKey derives each record's dedup key with fn (default
// HeaderKey(HeaderID)), for example from a business id in the payload (see
// idem.DeriveKey), or [OffsetKey]. A record for which fn fails, or returns
// an invalid key, follows the MissingKeyPolicy. For Consumer and
// KeystoreConsumer: an OffsetConsumer and a TransactConsumer key nothing.
func WithKey(fn KeyFunc) Option {
	return shared(consume.WithKey[*kgo.Record](fn), optKey)
}

// WithFingerprint stores fn(record) with each key (at most
// idem.MaxFingerprintLen bytes: a digest of the payload, never the payload);
// a redelivery of the key with another fingerprint is dead-lettered with
// reason idem.ReasonFingerprintMismatch, and a longer fingerprint with
// reason idem.ReasonInvalidFingerprint. For Consumer and KeystoreConsumer.
func WithFingerprint(fn func(*kgo.Record) []byte) Option {
	return shared(consume.WithFingerprint(fn), optFingerprint)
}

// WithMissingKey sets what happens to a record whose key cannot be derived
// (default DeadLetterMissing). For Consumer and KeystoreConsumer.
func WithMissingKey(p MissingKeyPolicy) Option {
	return func(c *config) error {
		if p != DeadLetterMissing && p != StopOnMissing {
			return invalid("unknown missing-key policy %d", p)
		}
		c.missing, c.given = p, c.given|optMissingKey
		return nil
	}
}

// WithMaxAttempts sets how many times a failing handler runs for one record
// before the record is dead-lettered with reason idem.ReasonMaxAttempts (default
// DefaultMaxAttempts; 1 means no retry). Errors marked with idem.Permanent
// are not retried. The retries wait the WithBackoff delays. For every
// consumer.
func WithMaxAttempts(n int) Option {
	return shared(consume.WithMaxAttempts[*kgo.Record](n), 0)
}

// WithBackoff sets the delays between a record's attempts: drawn between
// min/2 and min·2^(attempt-1), at most max (full jitter; default
// DefaultBackoffMin to DefaultBackoffMax; 0 <= min <= max). For every
// consumer.
func WithBackoff(min, max time.Duration) Option {
	return shared(consume.WithBackoff[*kgo.Record](min, max), 0)
}

// WithDeadLetter names the topic that records go to when their handler
// keeps failing, fails permanently, or they have no usable key. Without it,
// such a record stops Run with an error wrapping ErrDeadLetter, and its
// offset is not committed: a record is never acknowledged and dropped. For
// every consumer.
func WithDeadLetter(topic string) Option {
	return func(c *config) error {
		if topic == "" {
			return invalid("empty dead-letter topic")
		}
		c.dlq = topic
		return nil
	}
}

// WithBatchSize bounds the records taken per poll (default
// DefaultBatchSize, at most 10000). One poll is processed before the group may rebalance,
// so it must be processed well within the group's rebalance timeout. For
// every consumer.
func WithBatchSize(n int) Option {
	return shared(consume.WithBatchSize[*kgo.Record](n), 0)
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// WithOffsetsTable names the offsets table of an [OffsetConsumer] (default
// DefaultOffsetsTable). It must be a plain SQL identifier. For
// OffsetConsumer.
func WithOffsetsTable(name string) Option {
	return func(c *config) error {
		if !identRE.MatchString(name) {
			return invalid("offsets table %q is not a plain identifier", name)
		}
		c.table, c.given = name, c.given|optOffsetsTable
		return nil
	}
}

// WithSetHandler makes a [Consumer] apply each partition's polled batch
// with fn: the batch's keys are recorded with one multi-row insert and fn
// is called once, in the same transaction, with the records whose keys were
// new (inbox.ProcessBatchSet), so a batch costs a fixed number of
// statements whatever its size.
//
// NewConsumer's per-record Handler becomes the fallback: when fn fails, the
// transaction is rolled back whole and the batch is run again one record at
// a time with that Handler (each record in its own savepoint), so a failing
// record is isolated, retried alone and dead-lettered exactly as without
// WithSetHandler, while the others commit. The Handler may be nil when fn is
// given; then a failing fn fails the whole batch: nothing of it commits and
// no offset is marked; the batch is retried as a whole, up to
// WithMaxAttempts runs with the WithBackoff delays (once for an
// idem.Permanent error), and then Run returns an error wrapping the
// *inbox.HandlerError. The records are consumed again from the last
// committed offset by the next Run: a record that can never succeed then
// blocks its partition, so give a Handler wherever poison records are
// possible. For Consumer.
func WithSetHandler(fn SetHandler) Option {
	return shared(consume.WithSetHandler[*kgo.Record](consume.SetHandler[*kgo.Record](fn)), optSetHandler)
}

// WithKeystoreOptions passes opts (keystore.WithLease, keystore.WithTTL,
// keystore.WithWait) to the keystore.Do call of every record of a
// [KeystoreConsumer]. The lease must exceed the handler's worst case. For
// KeystoreConsumer.
func WithKeystoreOptions(opts ...keystore.Option) Option {
	return func(c *config) error {
		if slices.ContainsFunc(opts, func(o keystore.Option) bool { return o == nil }) {
			return invalid("nil keystore option")
		}
		c.doOpts, c.given = append(c.doOpts, opts...), c.given|optKeystore
		return nil
	}
}

// WithLogger sets a logger for retries, dead-lettering and rebalances
// (default: discard). For every consumer.
func WithLogger(l *slog.Logger) Option {
	return shared(consume.WithLogger[*kgo.Record](l), 0)
}

// WithObserver calls fn, synchronously from Run, once per record that
// reached an outcome (for metrics and tests); a TransactConsumer calls it
// only after the record's transaction committed. fn must not block. For
// every consumer.
func WithObserver(fn func(Event)) Option {
	return shared(consume.WithObserver(fn), 0)
}

// WithTracer traces the consume loop through t (idemotel.NewTracer for
// OpenTelemetry): a span per partition batch (idem.OpConsumeBatch; a
// TransactConsumer's covers its whole poll), whose context the inbox
// transaction runs in, and a span per record and run (idem.OpConsume),
// child of the batch's, linked to the trace context in the record's
// headers, ended with the record's outcome. For every consumer.
func WithTracer(t idem.Tracer) Option {
	return shared(consume.WithTracer[*kgo.Record](t), 0)
}
