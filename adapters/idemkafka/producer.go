package idemkafka

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
)

// Headers of idem's producer sequence stamp, read by SequenceFrom.
const (
	HeaderProducer = "idem-producer" // producer id, 8 bytes big-endian
	HeaderEpoch    = "idem-epoch"    // epoch, 2 bytes big-endian
	HeaderSeq      = "idem-seq"      // sequence, 4 bytes big-endian
)

// Producer produces records that a Consumer can deduplicate: each carries a
// stable id in the HeaderID header.
//
// Two layers of deduplication meet here. franz-go's idempotent producer is on
// by default: the broker drops a batch the client resends after a lost
// acknowledgement (Kafka's producer id and sequence rules, see package
// sequence). It does not cover a record the application produces twice (a
// retry after a crash, a resend after a timeout) — that second copy is a new
// record with a new offset. The idem-id header covers it: every copy carries
// the same id, and the consuming inbox applies it once. Derive the id from the
// operation (idem.DeriveKey), never mint one per attempt.
type Producer struct {
	cl *kgo.Client
}

// NewProducer wraps cl. It refuses a client built with
// kgo.DisableIdempotentWrite, whose resends after a lost acknowledgement
// append duplicates the broker would otherwise drop.
func NewProducer(cl *kgo.Client) (*Producer, error) {
	if cl == nil {
		return nil, invalid("nil client")
	}
	if off, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); off {
		return nil, invalid("client has idempotent writes disabled")
	}
	return &Producer{cl: cl}, nil
}

// Produce stamps r with id (replacing any HeaderID header) and produces it,
// waiting for the broker's acknowledgement. An error means the record may or
// may not have been written: produce it again with the same id, and the
// consumer applies it once.
func (p *Producer) Produce(ctx context.Context, id string, r *kgo.Record) error {
	if err := idem.ValidateKey(id); err != nil {
		return fmt.Errorf("idemkafka: produce: %w", err)
	}
	SetID(r, id)
	if err := p.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("idemkafka: produce %s: %w", id, err)
	}
	return nil
}

// SetID sets r's HeaderID header to id, replacing any there.
func SetID(r *kgo.Record, id string) {
	setHeader(r, HeaderID, []byte(id))
}

// SetSequence stamps r with an idempotent-producer position (producer id,
// epoch, sequence) in the HeaderProducer, HeaderEpoch and HeaderSeq headers.
// A consumer that reads them with SequenceFrom can deduplicate with one
// high-water mark per (producer, partition) (sequence.SQLMarks) instead of a
// key per record. The caller numbers records per partition, 0, 1, 2, …, and
// must therefore choose the partition itself (r.Partition with a manual
// partitioner): a sequence is only meaningful within one partition.
func SetSequence(r *kgo.Record, producer int64, epoch int16, seq int32) {
	setHeader(r, HeaderProducer, binary.BigEndian.AppendUint64(nil, uint64(producer)))
	setHeader(r, HeaderEpoch, binary.BigEndian.AppendUint16(nil, uint16(epoch)))
	setHeader(r, HeaderSeq, binary.BigEndian.AppendUint32(nil, uint32(seq)))
}

// SequenceFrom reads the stamp written by SetSequence; ok is false when r has
// none or a malformed one.
func SequenceFrom(r *kgo.Record) (producer int64, epoch int16, seq int32, ok bool) {
	var got int
	for _, h := range r.Headers {
		switch {
		case h.Key == HeaderProducer && len(h.Value) == 8:
			producer = int64(binary.BigEndian.Uint64(h.Value))
			got |= 1
		case h.Key == HeaderEpoch && len(h.Value) == 2:
			epoch = int16(binary.BigEndian.Uint16(h.Value))
			got |= 2
		case h.Key == HeaderSeq && len(h.Value) == 4:
			seq = int32(binary.BigEndian.Uint32(h.Value))
			got |= 4
		}
	}
	return producer, epoch, seq, got == 7
}

func setHeader(r *kgo.Record, key string, val []byte) {
	hs := r.Headers[:0]
	for _, h := range r.Headers {
		if h.Key != key {
			hs = append(hs, h)
		}
	}
	r.Headers = append(hs, kgo.RecordHeader{Key: key, Value: val})
}
