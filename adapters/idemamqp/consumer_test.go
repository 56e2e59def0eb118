package idemamqp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemamqp"
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	amqp "github.com/rabbitmq/amqp091-go"
)

func TestOptionsValidated(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	e := newEffects(t)
	for name, opts := range map[string][]idemamqp.Option{
		"prefetch 0":      {idemamqp.WithPrefetch(0)},
		"batch over qos":  {idemamqp.WithPrefetch(10), idemamqp.WithBatchSize(20)},
		"max attempts 0":  {idemamqp.WithMaxAttempts(0)},
		"nil key":         {idemamqp.WithKey(nil)},
		"nil set handler": {idemamqp.WithSetHandler(nil)},
		"nil option":      {nil},
	} {
		if _, err := idemamqp.NewConsumer(conn, "q", e.In, e.apply, opts...); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := idemamqp.NewConsumer(conn, "q", e.In, nil); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("no handler: %v", err)
	}
	if _, err := idemamqp.NewConsumer(conn, "q", e.In, nil, idemamqp.WithSetHandler(newSetRecorder().handle)); err != nil {
		t.Errorf("set handler alone: %v", err)
	}
	// A publisher option given to a consumer, or the other way round, no
	// longer compiles: the two have their own option types.
	if _, err := idemamqp.NewPublisher(conn, nil); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("nil publisher option: err = %v", err)
	}
}

func publishN(t testing.TB, conn *amqp.Connection, queue string, ids ...string) {
	t.Helper()
	p := newPublisher(t, conn)
	for _, id := range ids {
		if err := p.Publish(context.Background(), "", queue, amqp.Publishing{Body: []byte("body of " + id)}, id); err != nil {
			t.Fatal(err)
		}
	}
}

// The consumer's connection dies after the inbox commit and before the ack.
// The broker requeues the deliveries; the restarted consumer finds their
// keys, acks them as duplicates, and the effects stay applied once.
func TestCrashBetweenCommitAndAck(t *testing.T) {
	t.Parallel()
	admin, tp, e := newEnv(t)
	ids := consumetest.Keys(5)
	publishN(t, admin, tp.queue, ids...)
	committed := crash(t, tp, e, e.apply, len(ids), idemamqp.WithBatchSize(len(ids)), idemamqp.WithLinger(200*time.Millisecond))
	ev := recoverAll(t, tp, e, e.apply, committed, len(ids)-committed)
	ev.Each(func(e idemamqp.Event) {
		if e.Outcome == idem.Duplicate && !e.Msg.Redelivered {
			t.Errorf("%s: duplicate without the redelivered flag", e.Key)
		}
	})
	consumetest.WantOnce(t, e.Counts(t), nil, ids)
	// Anything not acked would be back in the queue now that the consumer's
	// channel is closed.
	waitFor(t, 5*time.Second, "an empty queue", func() bool { return tp.ready(t, tp.queue) == 0 })
}

// A delivery whose handler keeps failing is requeued with x-idem-attempts
// counted, then dead-lettered at the limit; a permanent error and a
// delivery without a message-id are dead-lettered at once.
func TestPoisonDeadLettered(t *testing.T) {
	t.Parallel()
	conn, tp, e := newEnv(t)
	var mu sync.Mutex
	seen := map[string]int{} // highest attempt the handler saw
	handler := e.applyAfter(func(d amqp.Delivery) error {
		mu.Lock()
		a, _ := d.Headers[idemamqp.HeaderAttempts].(int32)
		seen[d.MessageId] = max(seen[d.MessageId], int(a)+1)
		mu.Unlock()
		return consumetest.PoisonOrMalformed(d.MessageId)
	})
	var ev events
	publishN(t, conn, tp.queue, "good-1", "poison", "malformed")
	if err := tp.ch.PublishWithContext(context.Background(), "", tp.queue, false, false, amqp.Publishing{Body: []byte("no id")}); err != nil {
		t.Fatal(err)
	}
	publishN(t, conn, tp.queue, "good-2")
	r := startDLQ(t, conn, tp, e, handler, 3, &ev)
	waitFor(t, 20*time.Second, "three dead letters", func() bool { return ev.Count(idem.DeadLettered) == 3 })
	if err := r.Stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	mu.Lock()
	if seen["poison"] != 3 || seen["malformed"] != 1 {
		t.Errorf("attempts: poison %d (want 3), malformed %d (want 1)", seen["poison"], seen["malformed"])
	}
	mu.Unlock()
	if got := e.Counts(t); got["good-1"] != 1 || got["good-2"] != 1 || len(got) != 2 {
		t.Errorf("effects %v, want good-1 and good-2 once", got)
	}
	if got := tp.ready(t, tp.queue); got != 0 {
		t.Errorf("%d messages left in the queue", got)
	}
	byReason := map[idem.Reason]amqp.Delivery{}
	for range 3 {
		d, ok, err := tp.ch.Get(tp.dlq, true)
		if err != nil || !ok {
			t.Fatalf("dead letter queue: ok=%v err=%v", ok, err)
		}
		byReason[idem.Reason(fmt.Sprint(d.Headers[idemamqp.HeaderReason]))] = d
	}
	want := map[idem.Reason]struct{ body, errText, id string }{
		idem.ReasonMaxAttempts: {"body of poison", "cannot parse amount", "poison"},
		idem.ReasonPermanent:   {"body of malformed", "schema v9 unknown", "malformed"},
		idem.ReasonMissingKey:  {"no id", "has no message-id", ""},
	}
	for reason, w := range want {
		d, ok := byReason[reason]
		if !ok {
			t.Errorf("no dead letter with reason %s", reason)
			continue
		}
		if string(d.Body) != w.body || d.MessageId != w.id || !strings.Contains(fmt.Sprint(d.Headers[idemamqp.HeaderError]), w.errText) ||
			d.Headers[idemamqp.HeaderQueue] != tp.queue {
			t.Errorf("%s: body %q id %q headers %v", reason, d.Body, d.MessageId, d.Headers)
		}
	}
}

// Without WithDeadLetter, a poison delivery is rejected without requeue
// and the queue's own dead-letter exchange takes it (x-death set by the
// broker).
func TestQueueDeadLetterExchange(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	tp := newTopology(t, conn, nil)
	q := tp.queue + "_dlx"
	if _, err := tp.ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-dead-letter-exchange": tp.dlx}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = tp.ch.QueueDelete(q, false, false, false) })
	e := newEffects(t)
	var ev events
	c, err := idemamqp.NewConsumer(conn, q, e.In, e.applyAfter(func(amqp.Delivery) error {
		return idem.Permanent(errors.New("bad"))
	}), idemamqp.WithObserver(ev.Observe))
	if err != nil {
		t.Fatal(err)
	}
	publishN(t, conn, q, "bad-1")
	r := start(c)
	waitFor(t, 10*time.Second, "a dead letter", func() bool { return ev.Count(idem.DeadLettered) == 1 })
	if err := r.Stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	waitFor(t, 5*time.Second, "the broker's dead letter", func() bool { return tp.ready(t, tp.dlq) == 1 })
	d, ok, err := tp.ch.Get(tp.dlq, true)
	if err != nil || !ok {
		t.Fatalf("get: ok=%v err=%v", ok, err)
	}
	if d.MessageId != "bad-1" || d.Headers["x-death"] == nil {
		t.Fatalf("dead letter id %q headers %v, want bad-1 with x-death", d.MessageId, d.Headers)
	}
}

// Publish sets message-id and returns after the broker's confirm.
func TestPublisherSetsMessageID(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	tp := newTopology(t, conn, nil)
	p := newPublisher(t, conn)
	ctx := context.Background()
	if err := p.Publish(ctx, "", tp.queue, amqp.Publishing{Body: []byte("x")}, "evt-1"); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctx, "", tp.queue, amqp.Publishing{}, ""); !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("empty id: err = %v", err)
	}
	// Confirmed: the message is in the queue when Publish returns.
	d, ok, err := tp.ch.Get(tp.queue, true)
	if err != nil || !ok {
		t.Fatalf("get: ok=%v err=%v", ok, err)
	}
	if d.MessageId != "evt-1" || d.DeliveryMode != amqp.Persistent {
		t.Fatalf("message-id %q delivery mode %d, want evt-1, persistent", d.MessageId, d.DeliveryMode)
	}
}

// With a set handler and no per-delivery handler: every message is
// published twice with one message-id (RabbitMQ does not deduplicate), and
// the consumer's connection dies after its first commit, before the ack.
// The restarted consumer acks the requeued and repeated deliveries as
// duplicates; each message-id reaches the set handler once and is applied
// once.
func TestSetHandlerAppliesOnce(t *testing.T) {
	t.Parallel()
	admin, tp, e := newEnv(t)
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
	conn, tp, e := newEnv(t)
	set := newSetRecorder()
	poison := consumetest.NewPoison(messageID)
	set.Fail = poison.Fail
	each := poison.Handler(e.apply)
	var ev events
	publishN(t, conn, tp.queue, consumetest.PoisonIDs...)
	r := startDLQ(t, conn, tp, e, each, 3, &ev, idemamqp.WithSetHandler(set.handle), idemamqp.WithLinger(100*time.Millisecond))
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
	conn, tp, e := newEnv(t)
	set := newSetRecorder()
	broken := consumetest.NewBroken[amqp.Delivery]()
	set.Fail = broken.Fail
	ids := consumetest.Keys(6)
	publishN(t, conn, tp.queue, ids...)
	var ev events
	r := startDLQ(t, conn, tp, e, nil, 2, &ev, idemamqp.WithSetHandler(set.handle), idemamqp.WithLinger(100*time.Millisecond))
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
