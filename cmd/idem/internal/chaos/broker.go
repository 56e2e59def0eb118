package chaos

import (
	"container/heap"
	"maps"
	"slices"
	"time"

	"github.com/idem-go/idem/internal/retry"
)

// The broker is an in-process queue with at-least-once semantics, the way
// SQS, RabbitMQ and a Kafka consumer group behave toward a consumer:
//
//   - a delivery stays in flight until the consumer acks it; unacked for the
//     visibility timeout, it is redelivered (an ack that was dropped looks
//     the same);
//   - when a consumer dies, every delivery it held is redelivered at once;
//   - a nack (the consumer could not do it now) redelivers after a backoff;
//   - redeliveries go to the front of the queue.
//
// For strategies that need each producer's messages in order (the sequence
// marks), the broker keeps one queue per worker slot and routes every
// producer to one slot, as a Kafka consumer group assigns a partition to one
// consumer; a replacement worker takes over its slot's queue. Otherwise all
// workers share one queue.
//
// It is owned by the harness's loop and is not safe for concurrent use.

// Nack backoff: the bound of retry.Backoff (no jitter, so that a seed's
// schedule is reproducible) for the nack's reason, base << min(nacks-1,
// nackMaxShift), capped at nackMaxDelay.
const (
	nackBaseError      = 5 * time.Millisecond
	nackBaseGap        = 2 * time.Millisecond
	nackBaseInProgress = 25 * time.Millisecond
	nackMaxShift       = 6
	nackMaxDelay       = 250 * time.Millisecond
)

// nackBackoff is the backoff starting at base, doubling nackMaxShift times
// at most, capped at nackMaxDelay.
func nackBackoff(base time.Duration) retry.Backoff {
	return retry.Backoff{Min: base, Max: min(base<<nackMaxShift, nackMaxDelay)}
}

var (
	nackErrorBackoff      = nackBackoff(nackBaseError)
	nackGapBackoff        = nackBackoff(nackBaseGap)
	nackInProgressBackoff = nackBackoff(nackBaseInProgress)
)

// deque is a ring buffer of entries.
type deque struct {
	buf        []entry
	head, size int
}

func (q *deque) len() int { return q.size }

func (q *deque) grow() {
	nb := make([]entry, max(16, 2*len(q.buf)))
	for i := range q.size {
		nb[i] = q.buf[(q.head+i)%len(q.buf)]
	}
	q.buf, q.head = nb, 0
}

func (q *deque) pushBack(e entry) {
	if q.size == len(q.buf) {
		q.grow()
	}
	q.buf[(q.head+q.size)%len(q.buf)] = e
	q.size++
}

func (q *deque) pushFront(e entry) {
	if q.size == len(q.buf) {
		q.grow()
	}
	q.head = (q.head - 1 + len(q.buf)) % len(q.buf)
	q.buf[q.head] = e
	q.size++
}

func (q *deque) popFront() (entry, bool) {
	if q.size == 0 {
		return entry{}, false
	}
	e := q.buf[q.head]
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return e, true
}

// delayed is a min-heap of entries waiting for their redelivery time.
type delayed []delayedEntry

type delayedEntry struct {
	due time.Time
	e   entry
}

func (h delayed) Len() int           { return len(h) }
func (h delayed) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h delayed) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *delayed) Push(x any)        { *h = append(*h, x.(delayedEntry)) }
func (h *delayed) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// flight is a delivery the broker waits for.
type flight struct {
	e        entry
	p        *proc // nil once its ack was dropped
	deadline time.Time
	ackLost  bool
}

// counters are a strategy run's broker-side statistics.
type counters struct {
	delivered, redelivered, nacks, acksLost, lateAcks int64
	dieOrders, kills, crashes, workerErrors, dupSkips int64
}

// broker holds one strategy run's queue.
type broker struct {
	msgs     []message
	sched    schedule
	points   []point
	vt       time.Duration
	queues   []deque // one, or one per worker slot
	later    delayed
	inflight map[uint64]*flight
	attempts []uint8
	pending  int // copies not yet acked
	total    int
	nextTag  uint64
	c        counters
}

// newBroker returns a broker holding order; slots > 1 routes each
// producer's messages to one worker slot.
func newBroker(msgs []message, order []entry, sched schedule, points []point, vt time.Duration, slots int) *broker {
	b := &broker{
		msgs: msgs, sched: sched, points: points, vt: vt,
		inflight: make(map[uint64]*flight), attempts: make([]uint8, len(msgs)),
		pending: len(order), total: len(order), nextTag: 1,
		queues: make([]deque, max(slots, 1)),
	}
	if len(b.queues) == 1 {
		b.queues[0].buf = make([]entry, len(order)+16)
	}
	for _, e := range order {
		b.queue(e).pushBack(e)
	}
	return b
}

// queue returns the queue e belongs to.
func (b *broker) queue(e entry) *deque {
	if len(b.queues) == 1 {
		return &b.queues[0]
	}
	return &b.queues[int(b.msgs[e.msg].producer)%len(b.queues)]
}

func (b *broker) done() bool { return b.pending == 0 }

// next takes the next copy to deliver and turns it into a delivery for p,
// with its fault. ok is false when nothing is ready.
func (b *broker) next(p *proc, now time.Time) (d delivery, f fault, ok bool) {
	e, ok := b.queues[p.slot%len(b.queues)].popFront()
	if !ok {
		return d, f, false
	}
	if b.attempts[e.msg] < 255 {
		b.attempts[e.msg]++
	}
	id := uint64(e.msg) + 1
	f = b.sched.faultFor(id, int(b.attempts[e.msg]), b.points)
	m := b.msgs[e.msg]
	d = delivery{tag: b.nextTag, msg: id, account: m.account, amount: m.amount, producer: m.producer, seq: m.seq, die: f.die}
	b.nextTag++
	b.inflight[d.tag] = &flight{e: e, p: p, deadline: now.Add(b.vt), ackLost: f.ackLost}
	b.c.delivered++
	if f.die != pointNone {
		b.c.dieOrders++
	}
	return d, f, true
}

// ack records p's ack of tag. A dropped ack leaves the delivery in flight
// until its visibility timeout.
func (b *broker) ack(p *proc, tag uint64, outcome byte) {
	fl := b.inflight[tag]
	if fl == nil || fl.p != p {
		b.c.lateAcks++ // redelivered meanwhile
		return
	}
	if fl.ackLost {
		fl.p = nil
		b.c.acksLost++
		return
	}
	delete(b.inflight, tag)
	b.pending--
	if outcome == outcomeDuplicate {
		b.c.dupSkips++
	}
}

// nack schedules tag's copy for redelivery after a backoff.
func (b *broker) nack(p *proc, tag uint64, reason byte, now time.Time) {
	fl := b.inflight[tag]
	if fl == nil || fl.p != p {
		b.c.lateAcks++
		return
	}
	delete(b.inflight, tag)
	b.c.nacks++
	e := fl.e
	if e.nacks < 255 {
		e.nacks++
	}
	backoff := nackErrorBackoff
	switch reason {
	case nackGap:
		backoff = nackGapBackoff
	case nackInProgress:
		backoff = nackInProgressBackoff
	}
	if reason != nackError && b.attempts[e.msg] > 0 {
		// Nothing was attempted: this attempt does not use up the
		// message's share of faults.
		b.attempts[e.msg]--
	}
	heap.Push(&b.later, delayedEntry{due: now.Add(backoff.Bound(int(e.nacks) - 1)), e: e})
}

// lost redelivers the copies p held when it died, in the order they were
// sent.
func (b *broker) lost(p *proc, held map[uint64]struct{}) {
	tags := slices.Sorted(maps.Keys(held))
	for _, tag := range slices.Backward(tags) {
		if fl := b.inflight[tag]; fl != nil && fl.p == p {
			delete(b.inflight, tag)
			b.queue(fl.e).pushFront(fl.e)
			b.c.redelivered++
		}
	}
}

// tick redelivers what timed out and what finished its backoff.
func (b *broker) tick(now time.Time) {
	for tag, fl := range b.inflight {
		if now.After(fl.deadline) {
			delete(b.inflight, tag)
			b.queue(fl.e).pushFront(fl.e)
			b.c.redelivered++
		}
	}
	for b.later.Len() > 0 && !b.later[0].due.After(now) {
		e := heap.Pop(&b.later).(delayedEntry).e
		b.queue(e).pushFront(e)
	}
}
