package idemamqp_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemamqp"
	"github.com/idem-go/idem/internal/consume/consumetest"
	"github.com/idem-go/idem/internal/settest"
	amqp "github.com/rabbitmq/amqp091-go"
)

// setRecorder is a set handler writing all its deliveries' effects with one
// multi-row INSERT, and counting how often each message-id reached it.
type setRecorder struct {
	*settest.Recorder[amqp.Delivery]
	handle func(context.Context, *sql.Tx, []amqp.Delivery) error
}

func newSetRecorder() *setRecorder {
	r := settest.New(func(d amqp.Delivery) string { return d.MessageId })
	return &setRecorder{r, r.Handler("INSERT INTO effects (key, data)", func(d amqp.Delivery) []any { return []any{d.MessageId, string(d.Body)} })}
}

// With a set handler and no per-delivery handler: every message is
// published twice with one message-id (RabbitMQ does not deduplicate), and
// the consumer's connection dies after its first commit, before the ack.
// The restarted consumer acks the requeued and repeated deliveries as
// duplicates; each message-id reaches the set handler once and is applied
// once.
func TestSetHandlerAppliesOnce(t *testing.T) {
	t.Parallel()
	admin := dial(t)
	tp := newTopology(t, admin, nil)
	e := newEffects(t)
	set := newSetRecorder()
	ids := consumetest.Keys(20)
	publishN(t, admin, tp.queue, ids...)
	publishN(t, admin, tp.queue, ids...) // producer retries with the same ids
	committed := crash(t, tp, e, nil, 2*len(ids), idemamqp.WithSetHandler(set.handle),
		idemamqp.WithBatchSize(10), idemamqp.WithLinger(200*time.Millisecond))
	// Each id is delivered twice: the repeats are duplicates too.
	recoverAll(t, tp, e, nil, len(ids)+committed, len(ids)-committed, idemamqp.WithSetHandler(set.handle))
	seen, calls := set.Snapshot()
	consumetest.WantOnce(t, e.Counts(t), seen, ids)
	if calls >= len(ids) {
		t.Errorf("set handler called %d times for %d messages: not batched", calls, len(ids))
	}
	waitFor(t, 5*time.Second, "an empty queue", func() bool { return tp.ready(t, tp.queue) == 0 })
}

// A group holding a poison delivery makes the set handler fail; the group is
// run again delivery by delivery with the Handler, which isolates the poison
// delivery: it is requeued with x-idem-attempts counted and dead-lettered at
// the limit, while the others commit once and are acked.
func TestSetHandlerPoisonFallback(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	tp := newTopology(t, conn, nil)
	e := newEffects(t)
	set := newSetRecorder()
	poison := consumetest.NewPoison(messageID)
	set.Fail = poison.Fail
	each := poison.Handler(e.apply)
	var ev events
	c, err := idemamqp.NewConsumer(conn, tp.queue, e.In, each, idemamqp.WithSetHandler(set.handle), idemamqp.WithMaxAttempts(3),
		idemamqp.WithDeadLetter(tp.dlx, ""), idemamqp.WithObserver(ev.Observe), idemamqp.WithLinger(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	publishN(t, conn, tp.queue, consumetest.PoisonIDs...)
	r := start(c)
	waitFor(t, 20*time.Second, "the dead letter", func() bool { return ev.Count(idem.DeadLettered) == 1 })
	if err := r.Stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	poison.Check(t, e.Effects, &ev, 3)
	if got := tp.ready(t, tp.queue); got != 0 {
		t.Errorf("%d messages left in the queue", got)
	}
	d, ok, err := tp.ch.Get(tp.dlq, true)
	if err != nil || !ok {
		t.Fatalf("dead letter queue: ok=%v err=%v", ok, err)
	}
	if d.MessageId != "poison" || d.Headers[idemamqp.HeaderReason] != string(idem.ReasonMaxAttempts) {
		t.Errorf("dead letter %q, headers %v", d.MessageId, d.Headers)
	}
}

// A set handler without a per-delivery handler that fails fails the whole
// group: nothing is applied or acked, every delivery is nacked with requeue,
// no attempt is counted and none is dead-lettered, even past the attempt
// limit. Once the handler works, each message is applied once.
func TestSetHandlerNoFallback(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	tp := newTopology(t, conn, nil)
	e := newEffects(t)
	set := newSetRecorder()
	broken := consumetest.NewBroken[amqp.Delivery]()
	set.Fail = broken.Fail
	ids := consumetest.Keys(6)
	publishN(t, conn, tp.queue, ids...)
	var ev events
	c, err := idemamqp.NewConsumer(conn, tp.queue, e.In, nil, idemamqp.WithSetHandler(set.handle), idemamqp.WithMaxAttempts(2),
		idemamqp.WithDeadLetter(tp.dlx, ""), idemamqp.WithObserver(ev.Observe), idemamqp.WithLinger(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r := start(c)
	waitFor(t, 20*time.Second, "three rounds of redeliveries", func() bool { return ev.Count(idem.Retried) >= 3*len(ids) })
	consumetest.WantNothingApplied(t, e.Effects, &ev, func(x idemamqp.Event) {
		if x.Msg.Headers[idemamqp.HeaderAttempts] != nil {
			t.Errorf("%s: attempt counted (%v) for a failure of the whole group", x.Key, x.Msg.Headers[idemamqp.HeaderAttempts])
		}
	})

	broken.Fix()
	waitFor(t, 20*time.Second, "all applied", func() bool { return ev.Count(idem.Applied) == len(ids) })
	if err := r.Stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	consumetest.WantAllAppliedOnce(t, e.Effects, &ev, ids)
	waitFor(t, 5*time.Second, "an empty queue", func() bool { return tp.ready(t, tp.queue) == 0 })
}
