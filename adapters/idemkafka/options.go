package idemkafka

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
)

// HeaderID is the record header that carries a message's stable id: the
// default dedup key of a Consumer, and what Producer.Produce stamps.
const HeaderID = "idem-id"

// Defaults of a Consumer.
const (
	DefaultRetries      = 3
	DefaultRetryMin     = 100 * time.Millisecond
	DefaultRetryMax     = 5 * time.Second
	DefaultMaxPoll      = 1000
	DefaultOffsetsTable = "idem_kafka_offsets"
)

// KeyFunc derives a record's dedup key. It returns an error (for example one
// wrapping ErrMissingKey) when the record carries no usable key.
type KeyFunc func(r *kgo.Record) (string, error)

// MissingKeyPolicy says what a Consumer does with a record whose key cannot be
// derived.
type MissingKeyPolicy int

const (
	// DeadLetterMissing sends the record to the dead-letter topic with
	// reason "missing-key" and moves on (the default). Without a dead-letter
	// topic it behaves like StopOnMissing.
	DeadLetterMissing MissingKeyPolicy = iota + 1
	// StopOnMissing makes Run return an error wrapping ErrMissingKey; the
	// record's offset is not committed, so it is seen again after a restart.
	StopOnMissing
)

// Outcome is what became of one record.
type Outcome int

const (
	// Applied: the handler's effect committed.
	Applied Outcome = iota + 1
	// Duplicate: the record's key was already recorded; the handler did not
	// run. The record is done.
	Duplicate
	// DeadLettered: the record was produced to the dead-letter topic.
	DeadLettered
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	case DeadLettered:
		return "dead-lettered"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Option configures a Consumer. Options are validated once, by NewConsumer
// and NewOffsetConsumer, whose errors wrap idem.ErrInvalidOption.
type Option func(*config) error

type config struct {
	key         KeyFunc
	fingerprint func(*kgo.Record) []byte
	missing     MissingKeyPolicy
	retries     int
	retryMin    time.Duration
	retryMax    time.Duration
	dlq         string
	maxPoll     int
	table       string
	log         *slog.Logger
	onOutcome   func(r *kgo.Record, o Outcome, err error)
	set         SetHandler
}

func defaultConfig() config {
	return config{
		key:      headerKey(HeaderID),
		missing:  DeadLetterMissing,
		retries:  DefaultRetries,
		retryMin: DefaultRetryMin,
		retryMax: DefaultRetryMax,
		maxPoll:  DefaultMaxPoll,
		table:    DefaultOffsetsTable,
		log:      slog.New(slog.DiscardHandler),
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("idemkafka: %s: %w", fmt.Sprintf(format, args...), idem.ErrInvalidOption)
}

// WithKeyHeader takes the dedup key from the named record header (default
// HeaderID). A record without it, or with an empty or repeated one, follows
// the MissingKeyPolicy.
func WithKeyHeader(name string) Option {
	return func(c *config) error {
		if name == "" {
			return invalid("empty key header name")
		}
		c.key = headerKey(name)
		return nil
	}
}

// WithKeyFunc derives the dedup key with fn, for example from a business id
// in the payload (see idem.DeriveKey). An error from fn follows the
// MissingKeyPolicy.
func WithKeyFunc(fn KeyFunc) Option {
	return func(c *config) error {
		if fn == nil {
			return invalid("nil key func")
		}
		c.key = fn
		return nil
	}
}

// WithOffsetKey keys records by topic, partition and offset. Every record has
// one, but offsets identify a position in one log, not a message: a message
// produced twice gets two offsets (not deduplicated), and after the topic is
// recreated or its records are repartitioned into a new topic, old keys name
// other messages (wrongly dropped as duplicates). Prefer a stable id header.
func WithOffsetKey() Option {
	return func(c *config) error {
		c.key = OffsetKey
		return nil
	}
}

// WithFingerprint stores fn(record) with each key (at most 64 bytes, a digest
// of the payload); a redelivery of the key with another fingerprint is
// dead-lettered with reason "fingerprint-mismatch".
func WithFingerprint(fn func(r *kgo.Record) []byte) Option {
	return func(c *config) error {
		if fn == nil {
			return invalid("nil fingerprint func")
		}
		c.fingerprint = fn
		return nil
	}
}

// WithMissingKey sets what happens to a record whose key cannot be derived
// (default DeadLetterMissing).
func WithMissingKey(p MissingKeyPolicy) Option {
	return func(c *config) error {
		if p != DeadLetterMissing && p != StopOnMissing {
			return invalid("unknown missing-key policy %d", p)
		}
		c.missing = p
		return nil
	}
}

// WithRetries sets how many times a failing handler is run again for one
// record (n further attempts, so n+1 in all), with jittered exponential
// backoff from min to max, before the record is dead-lettered. Errors marked
// with idem.Permanent are not retried. Default: 3 retries, 100 ms to 5 s.
func WithRetries(n int, min, max time.Duration) Option {
	return func(c *config) error {
		if n < 0 || n > 1000 {
			return invalid("retries %d out of range 0..1000", n)
		}
		if min <= 0 || max < min {
			return invalid("retry backoff %v..%v: need 0 < min <= max", min, max)
		}
		c.retries, c.retryMin, c.retryMax = n, min, max
		return nil
	}
}

// WithDeadLetterTopic names the topic that records go to when their handler
// keeps failing, fails permanently, or they have no key. Without it, such a
// record stops Run with an error, and its offset is not committed: a record is
// never acknowledged and dropped.
func WithDeadLetterTopic(topic string) Option {
	return func(c *config) error {
		if topic == "" {
			return invalid("empty dead-letter topic")
		}
		c.dlq = topic
		return nil
	}
}

// WithMaxPollRecords bounds the records taken per poll (default 1000). One
// poll is processed before the group may rebalance, so it must be processed
// well within the group's rebalance timeout.
func WithMaxPollRecords(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return invalid("max poll records %d: must be positive", n)
		}
		c.maxPoll = n
		return nil
	}
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// WithOffsetsTable names the offsets table of NewOffsetConsumer (default
// DefaultOffsetsTable). It must be a plain SQL identifier.
func WithOffsetsTable(name string) Option {
	return func(c *config) error {
		if !identRE.MatchString(name) {
			return invalid("offsets table %q is not a plain identifier", name)
		}
		c.table = name
		return nil
	}
}

// WithSetHandler makes a Consumer in inbox mode (NewConsumer) apply each
// partition's polled batch with fn: the batch's keys are recorded with one
// multi-row insert and fn is called once, in the same transaction, with the
// records whose keys were new (inbox.ProcessBatchSet), so a batch costs a
// fixed number of statements whatever its size.
//
// NewConsumer's per-message Handler becomes the fallback: when fn fails, the
// transaction is rolled back whole and the batch is run again one record at
// a time with that Handler (each record in its own savepoint), so a failing
// record is isolated, retried alone and dead-lettered exactly as without
// WithSetHandler, while the others commit. The Handler may be nil when fn is
// given; then a failing fn fails the whole batch: nothing of it commits and
// no offset is marked; the batch is retried as a whole with the WithRetries
// backoff (not at all for an idem.Permanent error), and when the retries are
// spent Run returns an error wrapping the *inbox.HandlerError. The records
// are consumed again from the last committed offset by the next Run: a
// record that can never succeed then blocks its partition, so give a
// Handler wherever poison records are possible.
//
// Offsets-in-database and keystore modes do not take a set handler.
func WithSetHandler(fn SetHandler) Option {
	return func(c *config) error {
		if fn == nil {
			return invalid("nil set handler")
		}
		c.set = fn
		return nil
	}
}

// WithLogger sets a logger for retries, dead-lettering and rebalances
// (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return invalid("nil logger")
		}
		c.log = l
		return nil
	}
}

// WithOutcome calls fn, synchronously from Run, once per record that reached
// an outcome (for metrics and tests). err is the last handler error of a
// dead-lettered record.
func WithOutcome(fn func(r *kgo.Record, o Outcome, err error)) Option {
	return func(c *config) error {
		if fn == nil {
			return invalid("nil outcome func")
		}
		c.onOutcome = fn
		return nil
	}
}

// ErrMissingKey is wrapped by the error of a record from which no key could be
// derived.
var ErrMissingKey = errors.New("idemkafka: record has no key")

func headerKey(name string) KeyFunc {
	return func(r *kgo.Record) (string, error) {
		var val []byte
		n := 0
		for _, h := range r.Headers {
			if h.Key == name {
				val = h.Value
				n++
			}
		}
		switch {
		case n == 0:
			return "", fmt.Errorf("%w: no %q header", ErrMissingKey, name)
		case n > 1:
			return "", fmt.Errorf("%w: %d %q headers", ErrMissingKey, n, name)
		case len(bytes.TrimSpace(val)) == 0:
			return "", fmt.Errorf("%w: empty %q header", ErrMissingKey, name)
		}
		return string(val), nil
	}
}

// OffsetKey is the KeyFunc of WithOffsetKey: "topic/partition/offset" with the
// offset zero-padded so that keys of one partition sort in log order (which
// keeps the inbox index append-mostly). See WithOffsetKey for its limits.
func OffsetKey(r *kgo.Record) (string, error) {
	k := r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + fmt.Sprintf("%020d", r.Offset)
	if len(k) > idem.MaxKeyLen {
		return idem.DeriveKey("idemkafka.offset", r.Topic, strconv.Itoa(int(r.Partition)), strconv.FormatInt(r.Offset, 10))
	}
	return k, nil
}
