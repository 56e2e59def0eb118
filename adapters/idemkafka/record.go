package idemkafka

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
)

// HeaderID is the record header that carries a message's stable id: the
// default dedup key of a consumer, and what Producer.Produce stamps.
const HeaderID = "idem-id"

// Headers of a dead-lettered record. The original key, value and headers are
// kept; these are added.
const (
	HeaderDLQError     = "idem-dlq-error"     // the last error's text
	HeaderDLQReason    = "idem-dlq-reason"    // an idem.Reason (idem.ReasonMaxAttempts, …)
	HeaderDLQTopic     = "idem-dlq-topic"     // original topic
	HeaderDLQPartition = "idem-dlq-partition" // original partition (decimal)
	HeaderDLQOffset    = "idem-dlq-offset"    // original offset (decimal)
	HeaderDLQAttempts  = "idem-dlq-attempts"  // handler runs made (decimal; 0 when the handler never ran)
	HeaderDLQGroup     = "idem-dlq-group"     // consumer group
)

// Errors callers branch on. Run's errors after Close wrap idem.ErrClosed,
// and a record without a key (StopOnMissing) stops Run with an error
// wrapping idem.ErrMissingKey.
var (
	// ErrDeadLetter is wrapped when a record had to be dead-lettered and
	// could not be: no dead-letter topic is configured, or producing to it
	// failed. The record's offset is not committed.
	ErrDeadLetter = errors.New("idemkafka: record not dead-lettered")

	errClosed = fmt.Errorf("idemkafka: consumer closed: %w", idem.ErrClosed)
)

// errRanOnce is a second Run's error. It matches idem.ErrClosed (the
// consumer will not consume again), but says why: Run was called before,
// not Close.
var errRanOnce error = ranOnceError{}

type ranOnceError struct{}

func (ranOnceError) Error() string {
	return "idemkafka: Run was already called; a consumer runs once: Close it and build a new one"
}

func (ranOnceError) Is(target error) bool { return target == idem.ErrClosed }

// Event reports one record to [WithObserver]: its outcome (idem.Applied,
// idem.Duplicate, idem.Retried before a run again in this process, or
// idem.DeadLettered with an idem.Reason), its key ("" for an OffsetConsumer
// and a TransactConsumer, which key nothing) and its attempt (handler runs
// so far, counting the one that decided). Every adapter reports the same
// event shape.
type Event = idem.DeliveryEvent[*kgo.Record]

// KeyFunc derives a record's dedup key. It returns an error (wrapping
// idem.ErrMissingKey) when the record carries no usable key.
type KeyFunc func(r *kgo.Record) (string, error)

// HeaderKey returns the KeyFunc that reads the dedup key from the named
// record header (the default is HeaderKey(HeaderID)). A record without it,
// or with an empty or repeated one, has no key. An empty name returns nil,
// which WithKey refuses.
func HeaderKey(name string) KeyFunc {
	if name == "" {
		return nil
	}
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
			return "", fmt.Errorf("idemkafka: no %q header: %w", name, idem.ErrMissingKey)
		case n > 1:
			return "", fmt.Errorf("idemkafka: %d %q headers: %w", n, name, idem.ErrMissingKey)
		case len(bytes.TrimSpace(val)) == 0:
			return "", fmt.Errorf("idemkafka: empty %q header: %w", name, idem.ErrMissingKey)
		}
		return string(val), nil
	}
}

// OffsetKey is a KeyFunc (WithKey(OffsetKey)) that keys records by
// "topic/partition/offset", the offset zero-padded so that keys of one
// partition sort in log order (which keeps the inbox index append-mostly).
// Every record has one, but offsets identify a position in one log, not a
// message: a message produced twice gets two offsets (not deduplicated), and
// after the topic is recreated or its records are repartitioned into a new
// topic, old keys name other messages (wrongly dropped as duplicates).
// Prefer a stable id header.
func OffsetKey(r *kgo.Record) (string, error) {
	k := r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + fmt.Sprintf("%020d", r.Offset)
	if len(k) > idem.MaxKeyLen {
		return idem.DeriveKey("idemkafka.offset", r.Topic, strconv.Itoa(int(r.Partition)), strconv.FormatInt(r.Offset, 10))
	}
	return k, nil
}

// where names a record in errors and logs.
func where(r *kgo.Record) string {
	return r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "@" + strconv.FormatInt(r.Offset, 10)
}

// deadLetterRecord is the copy of r that goes to the dead-letter topic dlq:
// r's key, value, headers and timestamp, and the HeaderDLQ* headers.
func deadLetterRecord(dlq, group string, r *kgo.Record, reason idem.Reason, attempts int, cause error) *kgo.Record {
	headers := make([]kgo.RecordHeader, 0, len(r.Headers)+7)
	headers = append(headers, r.Headers...)
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderDLQError, Value: []byte(cause.Error())},
		kgo.RecordHeader{Key: HeaderDLQReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderDLQTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderDLQPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
		kgo.RecordHeader{Key: HeaderDLQOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
		kgo.RecordHeader{Key: HeaderDLQAttempts, Value: []byte(strconv.Itoa(attempts))},
		kgo.RecordHeader{Key: HeaderDLQGroup, Value: []byte(group)},
	)
	return &kgo.Record{Topic: dlq, Key: r.Key, Value: r.Value, Headers: headers, Timestamp: r.Timestamp}
}
