package idemamqp_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemamqp"
	"github.com/idem-go/idem/inbox"
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
	set.Fail = func(ds []amqp.Delivery) error {
		for _, d := range ds {
			if d.MessageId == "poison" {
				return errors.New("group holds poison")
			}
		}
		return nil
	}
	var poisonRuns atomic.Int32
	each := func(ctx context.Context, tx *sql.Tx, d amqp.Delivery) error {
		if d.MessageId == "poison" {
			poisonRuns.Add(1)
			return errors.New("cannot parse amount")
		}
		return e.apply(ctx, tx, d)
	}
	var ev events
	c, err := idemamqp.NewConsumer(conn, tp.queue, e.In, each, idemamqp.WithSetHandler(set.handle), idemamqp.WithMaxAttempts(3),
		idemamqp.WithDeadLetter(tp.dlx, ""), idemamqp.WithObserver(ev.Observe), idemamqp.WithLinger(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	publishN(t, conn, tp.queue, "good-1", "good-2", "poison", "good-3", "good-4")
	r := start(c)
	waitFor(t, 20*time.Second, "the dead letter", func() bool { return ev.Count(idem.DeadLettered) == 1 })
	if err := r.Stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	got := e.Counts(t)
	for _, k := range []string{"good-1", "good-2", "good-3", "good-4"} {
		if got[k] != 1 {
			t.Errorf("%s applied %d times, want 1", k, got[k])
		}
	}
	if len(got) != 4 || ev.Count(idem.Applied) != 4 {
		t.Errorf("effects %v, applied events %d; want the four good messages", got, ev.Count(idem.Applied))
	}
	if n := poisonRuns.Load(); n != 3 {
		t.Errorf("the Handler ran %d times on the poison delivery, want 3 (one per attempt)", n)
	}
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
	var broken atomic.Bool
	broken.Store(true)
	set.Fail = func([]amqp.Delivery) error {
		if broken.Load() {
			return errors.New("set broken")
		}
		return nil
	}
	const n = 6
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("order-%d", i))
	}
	publishN(t, conn, tp.queue, ids...)
	var ev events
	c, err := idemamqp.NewConsumer(conn, tp.queue, e.In, nil, idemamqp.WithSetHandler(set.handle), idemamqp.WithMaxAttempts(2),
		idemamqp.WithDeadLetter(tp.dlx, ""), idemamqp.WithObserver(ev.Observe), idemamqp.WithLinger(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r := start(c)
	waitFor(t, 20*time.Second, "three rounds of redeliveries", func() bool { return ev.Count(idem.Retried) >= 3*n })
	if got := e.Counts(t); len(got) != 0 || ev.Count(idem.Applied) != 0 || ev.Count(idem.DeadLettered) != 0 {
		t.Fatalf("while the set handler fails: effects %v, applied %d, dead-lettered %d; want nothing",
			got, ev.Count(idem.Applied), ev.Count(idem.DeadLettered))
	}
	ev.Each(func(x idemamqp.Event) {
		var he *inbox.HandlerError
		if !errors.As(x.Err, &he) {
			t.Errorf("retried event error %v, want an *inbox.HandlerError", x.Err)
		}
		if x.Msg.Headers[idemamqp.HeaderAttempts] != nil {
			t.Errorf("%s: attempt counted (%v) for a failure of the whole group", x.Key, x.Msg.Headers[idemamqp.HeaderAttempts])
		}
	})

	broken.Store(false)
	waitFor(t, 20*time.Second, "all applied", func() bool { return ev.Count(idem.Applied) == n })
	if err := r.Stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	got := e.Counts(t)
	for _, k := range ids {
		if got[k] != 1 {
			t.Errorf("%s applied %d times, want 1", k, got[k])
		}
	}
	if ev.Count(idem.DeadLettered) != 0 {
		t.Errorf("%d dead-lettered, want 0", ev.Count(idem.DeadLettered))
	}
	waitFor(t, 5*time.Second, "an empty queue", func() bool { return tp.ready(t, tp.queue) == 0 })
}
