package idemkafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/outbox"
)

// HeaderOutboxSeq is the record header that carries the outbox's sequence
// number of a message published by an [OutboxPublisher], in decimal.
const HeaderOutboxSeq = "idem-outbox-seq"

// OutboxPublisher publishes outbox messages (package outbox) to Kafka. It
// implements [outbox.Publisher]: pass it to outbox.NewRelay.
//
// Each message becomes one record on m.Topic with record key m.OrderingKey
// (empty: no key), value m.Payload, the message's headers (sorted by name), and then
// [HeaderID] = m.ID and [HeaderOutboxSeq] = m.Seq, which replace any message
// headers of the same names. The records are produced in slice order and
// Publish waits for every acknowledgement.
//
// # Order
//
// The record key picks the partition (with franz-go's default, key-hashing
// partitioner), so one aggregate's messages land on one partition, and the relay hands them over in outbox order. Within a
// partition franz-go's idempotent producer (which [NewProducer] requires,
// and which implies acks=all) keeps the produce order, even across its
// internal retries. Messages with an empty key have no order with others.
//
// # What happens if the process dies
//
// Publish returns nil only when the broker has acknowledged every record of
// the batch; otherwise the relay rolls its mark back and publishes the whole
// batch again later. A relay that dies after Publish and before its mark
// commits does the same after the restart. Either way some records are in
// the log twice, with the same [HeaderID]: a [Consumer] keys records by that
// header by default and applies each message once. Offset keys ([OffsetKey])
// and an [OffsetConsumer] do not absorb these copies: each copy has its own
// offset. A republished batch repeats the records that were already
// acknowledged, so on a partition a message's second copy follows later
// messages of its key; a consumer that deduplicates by id applies the first
// copies, which are in outbox order.
type OutboxPublisher struct {
	p *Producer
}

// OutboxPublisher returns a publisher for outbox relays that produces
// through p's client.
func (p *Producer) OutboxPublisher() *OutboxPublisher { return &OutboxPublisher{p: p} }

var _ outbox.Publisher = (*OutboxPublisher)(nil)

// Publish produces msgs, in order, and waits until the broker has
// acknowledged all of them. It returns an error if any record failed (the
// others may have been written); the relay then publishes the batch again,
// with the same ids. It produces nothing if a message has an invalid ID or
// no topic.
func (o *OutboxPublisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	rs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		if err := idem.ValidateKey(m.ID); err != nil {
			return fmt.Errorf("idemkafka: outbox publish: message %d: %w", i, err)
		}
		if m.Topic == "" {
			return fmt.Errorf("idemkafka: outbox publish: message %s: %w: empty topic", m.ID, outbox.ErrInvalidMessage)
		}
		rs[i] = OutboxRecord(m)
	}
	results := o.p.cl.ProduceSync(ctx, rs...)
	var errs []error
	failed := 0
	for _, res := range results {
		if res.Err != nil {
			if failed < 3 {
				errs = append(errs, fmt.Errorf("%s: %w", recordID(res.Record), res.Err))
			}
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("idemkafka: outbox publish: %d of %d records not acknowledged: %w", failed, len(rs), errors.Join(errs...))
	}
	return nil
}

// OutboxRecord returns the record an [OutboxPublisher] produces for m. Use
// it to produce outbox messages with your own client and options.
func OutboxRecord(m outbox.Message) *kgo.Record {
	r := &kgo.Record{Topic: m.Topic, Value: m.Payload}
	if m.OrderingKey != "" {
		r.Key = []byte(m.OrderingKey)
	}
	if len(m.Headers) > 0 {
		names := make([]string, 0, len(m.Headers))
		for k := range m.Headers {
			if k != HeaderID && k != HeaderOutboxSeq {
				names = append(names, k)
			}
		}
		slices.Sort(names)
		r.Headers = make([]kgo.RecordHeader, 0, len(names)+2)
		for _, k := range names {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(m.Headers[k])})
		}
	}
	r.Headers = append(r.Headers,
		kgo.RecordHeader{Key: HeaderID, Value: []byte(m.ID)},
		kgo.RecordHeader{Key: HeaderOutboxSeq, Value: strconv.AppendInt(nil, m.Seq, 10)})
	return r
}

func recordID(r *kgo.Record) string {
	if r != nil {
		for _, h := range r.Headers {
			if h.Key == HeaderID {
				return string(h.Value)
			}
		}
	}
	return "?"
}
