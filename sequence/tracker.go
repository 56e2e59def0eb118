package sequence

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/idem-go/idem"
)

// CachedBatches is how many of a producer's most recent batches per
// partition are remembered for duplicate detection: Kafka's broker keeps 5,
// which is why an idempotent Kafka producer may have at most 5 requests in
// flight per connection.
const CachedBatches = 5

// Batch describes one produce batch from an idempotent producer, as a broker
// sees it on the wire.
type Batch struct {
	ProducerID int64
	Epoch      int16
	Partition  int32
	FirstSeq   int32
	// LastSeq is the sequence of the batch's last record. It is below
	// FirstSeq when the batch spans the wrap from math.MaxInt32 to 0.
	LastSeq int32
	// Timestamp is the newest record time in the batch. It stamps the
	// producer's last activity, from which idle expiry is measured, as
	// Kafka uses the batch's max timestamp. The zero value means "now".
	Timestamp time.Time
}

// Verdict is the outcome of a batch that was not rejected.
type Verdict struct {
	// Duplicate reports an exact retry of a cached batch: nothing was
	// appended, and the producer should be told the batch succeeded.
	Duplicate bool
	// Offset is the first offset assigned to the batch when it was
	// appended, or, for a duplicate, the first offset the original batch
	// was given.
	Offset int64
}

// Records reports how many records b holds: the sequences from FirstSeq to
// LastSeq inclusive, counting through the wrap from math.MaxInt32 to 0.
func (b Batch) Records() int64 {
	if b.LastSeq >= b.FirstSeq {
		return int64(b.LastSeq) - int64(b.FirstSeq) + 1
	}
	return int64(math.MaxInt32) - int64(b.FirstSeq) + 1 + int64(b.LastSeq) + 1
}

func (b Batch) validate() error {
	switch {
	case b.ProducerID < 0:
		return fmt.Errorf("sequence: ProducerID %d is negative: %w", b.ProducerID, ErrInvalidBatch)
	case b.Epoch < 0:
		return fmt.Errorf("sequence: Epoch %d is negative: %w", b.Epoch, ErrInvalidBatch)
	case b.Partition < 0:
		return fmt.Errorf("sequence: Partition %d is negative: %w", b.Partition, ErrInvalidBatch)
	case b.FirstSeq < 0:
		return fmt.Errorf("sequence: FirstSeq %d is negative: %w", b.FirstSeq, ErrInvalidBatch)
	case b.LastSeq < 0:
		return fmt.Errorf("sequence: LastSeq %d is negative: %w", b.LastSeq, ErrInvalidBatch)
	}
	return nil
}

// nextSeq is the sequence that follows s: Kafka sequences wrap from
// math.MaxInt32 to 0.
func nextSeq(s int32) int32 {
	if s == math.MaxInt32 {
		return 0
	}
	return s + 1
}

// cached is one remembered batch: its first and last sequence packed into
// one word (so a duplicate probe is one comparison) and its first offset.
type cached struct {
	seqs   uint64
	offset int64
}

func packSeqs(first, last int32) uint64 { return uint64(uint32(first))<<32 | uint64(uint32(last)) }

func (c cached) first() int32 { return int32(c.seqs >> 32) }
func (c cached) last() int32  { return int32(uint32(c.seqs)) }

// producerState is what is kept per (producer, partition). The batches live
// in a fixed array used as a ring so that accepting a batch never allocates.
type producerState struct {
	batches [CachedBatches]cached
	lastTS  int64 // Unix nanoseconds of the newest accepted batch
	log     *partitionLog
	lastSeq int32 // LastSeq of the newest cached batch
	epoch   int16
	head    uint8 // index of the oldest cached batch
	n       uint8 // cached batches, 1..CachedBatches
}

// partitionLog is a partition's log end offset. Every producer state of a
// partition points at the same one, so Check needs one map lookup.
type partitionLog struct {
	end int64
}

func (p *producerState) push(c cached) {
	if p.n < CachedBatches {
		p.batches[(int(p.head)+int(p.n))%CachedBatches] = c
		p.n++
		return
	}
	p.batches[p.head] = c // overwrite the oldest
	p.head = (p.head + 1) % CachedBatches
}

func (p *producerState) reset(epoch int16) {
	p.epoch, p.head, p.n = epoch, 0, 0
}

// find returns the cached batch with exactly these sequences. The live
// slots are always batches[:n] (the ring only wraps once it is full), and
// order does not matter for an exact match.
func (p *producerState) find(seqs uint64) (cached, bool) {
	for _, c := range p.batches[:p.n] {
		if c.seqs == seqs {
			return c, true
		}
	}
	return cached{}, false
}

// Tracker applies the Kafka (2.5 and later) broker rules for idempotent
// producers to a stream of batches and models each partition's log end
// offset, so it can answer what a broker answers: append at an offset,
// acknowledge a retry with its original offset, or reject.
//
// A Tracker is safe for concurrent use. Its state lives in memory only: a
// process that dies loses it unless it was saved with Snapshot, and a fresh
// Tracker treats every producer as unknown (any sequence is accepted), as a
// broker does after producer state is lost.
type Tracker struct {
	mu         sync.Mutex
	idle       int64 // nanoseconds
	producers  producerMap[*producerState]
	partitions map[int32]*partitionLog
}

// NewTracker returns an empty Tracker. The only option is WithIdleExpiry
// (default DefaultIdleExpiry).
func NewTracker(opts ...Option) (*Tracker, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if c.tableSet {
		return nil, fmt.Errorf("sequence: WithTable does not apply to a Tracker: %w", idem.ErrInvalidOption)
	}
	return &Tracker{
		idle:       int64(c.idle),
		producers:  newProducerMap[*producerState](0),
		partitions: make(map[int32]*partitionLog),
	}, nil
}

// Check decides what a broker does with batch b at time now and records the
// outcome, in Kafka's order:
//
//  1. Idle state is dropped first: a (producer, partition) whose newest
//     accepted batch is stamped at least the idle expiry before now is
//     forgotten (exactly the idle expiry old counts as expired, as Kafka's
//     "now - lastTimestamp >= producer.id.expiration.ms").
//  2. An unknown producer is accepted at any sequence and epoch (KIP-360).
//  3. Same epoch and a cached batch with exactly b's FirstSeq and LastSeq:
//     a Duplicate verdict carrying the original first offset.
//  4. A lower epoch: an error wrapping ErrFenced.
//  5. A higher epoch must start at sequence 0 (else *OutOfOrderError with
//     Expected 0); it replaces the epoch and empties the batch cache.
//  6. The same epoch must continue at the successor of the newest cached
//     LastSeq (0 after math.MaxInt32), else *OutOfOrderError. Partial
//     overlaps and supersets of cached batches are out of order.
//
// An accepted batch gets the partition's log end offset as its first offset
// and advances it by b.Records(); it becomes the newest of the producer's
// CachedBatches cached batches. A duplicate, a rejected batch or an invalid
// batch changes no state at all.
//
// Check does not allocate once the (producer, partition) and the partition
// have been seen.
func (t *Tracker) Check(b Batch, now time.Time) (Verdict, error) {
	if err := b.validate(); err != nil {
		return Verdict{}, err
	}
	nowNs := now.UnixNano()
	ts := nowNs
	if !b.Timestamp.IsZero() {
		ts = b.Timestamp.UnixNano()
	}
	k := producerKey{b.ProducerID, b.Partition}

	t.mu.Lock()
	defer t.mu.Unlock()
	p, _ := t.producers.get(k)
	if p == nil {
		p = &producerState{log: t.partition(b.Partition)}
		t.producers.set(k, p)
	} else if p.n > 0 && nowNs-p.lastTS >= t.idle {
		p.n = 0 // expired: forget it, but keep the allocation
	}

	if p.n > 0 {
		if b.Epoch == p.epoch {
			if c, ok := p.find(packSeqs(b.FirstSeq, b.LastSeq)); ok {
				return Verdict{Duplicate: true, Offset: c.offset}, nil
			}
		}
		switch {
		case b.Epoch < p.epoch:
			return Verdict{}, fmt.Errorf("sequence: producer %d partition %d sent epoch %d, current epoch is %d: %w",
				b.ProducerID, b.Partition, b.Epoch, p.epoch, ErrFenced)
		case b.Epoch > p.epoch:
			if b.FirstSeq != 0 {
				return Verdict{}, &OutOfOrderError{Expected: 0, Got: b.FirstSeq}
			}
		default:
			if want := nextSeq(p.lastSeq); b.FirstSeq != want {
				return Verdict{}, &OutOfOrderError{Expected: want, Got: b.FirstSeq}
			}
		}
	}

	// Accepted. A new epoch (or a producer seen for the first time)
	// starts an empty cache.
	if p.n == 0 || b.Epoch != p.epoch {
		p.reset(b.Epoch)
	}
	off := p.log.end
	p.log.end += b.Records()
	p.push(cached{seqs: packSeqs(b.FirstSeq, b.LastSeq), offset: off})
	p.lastSeq = b.LastSeq
	p.lastTS = ts
	return Verdict{Offset: off}, nil
}

// partition returns the log of partition id, creating it at offset 0.
// t.mu must be held.
func (t *Tracker) partition(id int32) *partitionLog {
	l := t.partitions[id]
	if l == nil {
		l = &partitionLog{}
		t.partitions[id] = l
	}
	return l
}

// LogEndOffset reports the offset the next appended batch of partition would
// get: the number of records appended to it so far.
func (t *Tracker) LogEndOffset(partition int32) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.partitions[partition]; l != nil {
		return l.end
	}
	return 0
}

// Len reports how many (producer, partition) states are held, including
// expired ones that Check or Sweep has not yet dropped.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.producers.len()
}

// Sweep drops every (producer, partition) state that is expired at now and
// reports how many it dropped. Check expires state lazily, one producer at a
// time; Sweep bounds the memory held for producers that never come back. It
// scans every state, so call it periodically (Kafka does every 10 minutes),
// not per batch. Partition log end offsets are kept.
func (t *Tracker) Sweep(now time.Time) int {
	nowNs := now.UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	dropped := 0
	for k, p := range t.producers.all() {
		if nowNs-p.lastTS >= t.idle {
			t.producers.del(k)
			dropped++
		}
	}
	return dropped
}
