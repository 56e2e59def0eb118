package sequence

import (
	"fmt"
	"sync"
)

// Consumer-side marks. When every message carries (producer, epoch, seq),
// with seq counting up by one per message per (producer, partition) as an
// idempotent producer numbers them, a consumer can recognise redeliveries by
// keeping one high-water mark per (producer, partition) instead of one key
// per message. Memory is O(producers × partitions), independent of the
// message rate and of how long duplicates can keep arriving.
//
// The rules follow the broker's, for messages rather than batches:
//
//   - an unknown (producer, partition) accepts any sequence and any epoch;
//   - a lower epoch than the mark's is fenced (ErrFenced);
//   - a higher epoch must start at sequence 0 (else *OutOfOrderError with
//     Expected 0);
//   - in the same epoch, the successor of the mark (0 after math.MaxInt32)
//     is applied; the mark itself and sequences behind it are duplicates;
//     a sequence ahead of the successor is a gap (*OutOfOrderError): a
//     message in between was never seen, and applying this one would make
//     the missing one a "duplicate" when it arrives.
//
// "Behind" and "ahead" are judged modulo 2^31, since sequences wrap: a
// sequence up to 2^30 - 1 past the successor is ahead, anything else is
// behind. A redelivery is therefore recognised as long as the consumer has
// not moved 2^30 (about a billion) messages past it.

// mark is one (producer, partition)'s high-water mark.
type mark struct {
	epoch int16
	seq   int32
}

const (
	seqSpace = int64(1) << 31 // sequences run 0..math.MaxInt32
	seqAhead = seqSpace / 2   // distances below this are ahead, the rest behind
)

// judge classifies message (epoch, seq) against mark m (known reports
// whether there is one). It returns apply=true for a message to apply,
// apply=false with a nil error for a duplicate, or a rejection.
func judge(m mark, known bool, epoch int16, seq int32) (bool, error) {
	if !known {
		return true, nil
	}
	switch {
	case epoch < m.epoch:
		return false, fmt.Errorf("sequence: epoch %d is older than the mark's epoch %d: %w", epoch, m.epoch, ErrFenced)
	case epoch > m.epoch:
		if seq != 0 {
			return false, &OutOfOrderError{Expected: 0, Got: seq}
		}
		return true, nil
	}
	next := nextSeq(m.seq)
	if seq == next {
		return true, nil
	}
	d := ((int64(seq)-int64(m.seq))%seqSpace + seqSpace) % seqSpace
	if d != 0 && d < seqAhead {
		return false, &OutOfOrderError{Expected: next, Got: seq}
	}
	return false, nil // the mark itself or behind it: a redelivery
}

// validMessage rejects what no idempotent producer sends; a message is a
// batch of one.
func validMessage(producer int64, epoch int16, partition, seq int32) error {
	return Batch{ProducerID: producer, Epoch: epoch, Partition: partition, FirstSeq: seq, LastSeq: seq}.validate()
}

// HighWater keeps consumer-side high-water marks in memory. It is safe for
// concurrent use.
//
// The marks are lost when the process dies. Use HighWater when the effects
// are lost with them (in-memory aggregates rebuilt from the log) or when the
// marks are saved and restored together with the effects; otherwise use
// SQLMarks, which commits the mark in the same transaction as the effect.
type HighWater struct {
	mu    sync.Mutex
	marks producerMap[mark]
}

// NewHighWater returns a HighWater with no marks.
func NewHighWater() *HighWater {
	return &HighWater{marks: newProducerMap[mark](0)}
}

// Check classifies a message without recording anything: apply=true means
// the message is new and next in line, apply=false with a nil error is a
// duplicate, and an error wrapping ErrFenced, *OutOfOrderError or
// ErrInvalidBatch is a rejection.
//
// Use Check, then the effect, then Accept when the effect can fail: a mark
// must never run ahead of an effect that did not happen, or the redelivery
// that should retry it is skipped as a duplicate and the message is lost.
func (h *HighWater) Check(producer int64, epoch int16, partition, seq int32) (apply bool, err error) {
	if err := validMessage(producer, epoch, partition, seq); err != nil {
		return false, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	m, ok := h.marks.get(producerKey{producer, partition})
	return judge(m, ok, epoch, seq)
}

// Accept classifies a message like Check and, when it is to be applied,
// moves the mark to it in the same critical section, so that of concurrent
// Accepts of one message exactly one returns apply=true. A duplicate or a
// rejection changes nothing.
//
// Accept records the message as seen before the caller's effect runs: call
// it after an effect that can fail has succeeded (see Check), or use it
// alone only when the effect cannot fail once Accept returned true.
func (h *HighWater) Accept(producer int64, epoch int16, partition, seq int32) (apply bool, err error) {
	if err := validMessage(producer, epoch, partition, seq); err != nil {
		return false, err
	}
	k := producerKey{producer, partition}
	h.mu.Lock()
	defer h.mu.Unlock()
	m, ok := h.marks.get(k)
	if apply, err = judge(m, ok, epoch, seq); apply {
		h.marks.set(k, mark{epoch: epoch, seq: seq})
	}
	return apply, err
}

// Mark reports the high-water mark of (producer, partition): the epoch and
// sequence of the newest applied message, and whether there is one.
func (h *HighWater) Mark(producer int64, partition int32) (epoch int16, seq int32, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m, ok := h.marks.get(producerKey{producer, partition})
	return m.epoch, m.seq, ok
}

// Len reports how many (producer, partition) marks are held.
func (h *HighWater) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.marks.len()
}
