package idemnats_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/internal/consume/consumetest"
	"github.com/idem-go/idem/internal/settest"
	"github.com/nats-io/nats.go/jetstream"
)

// setRecorder is a set handler writing all its messages' effects with one
// multi-row INSERT, and counting how often each key reached it.
type setRecorder struct {
	*settest.Recorder[jetstream.Msg]
	handle func(context.Context, *sql.Tx, []jetstream.Msg) error
}

func newSetRecorder(*effects) *setRecorder {
	id := func(m jetstream.Msg) string { return m.Headers().Get(jetstream.MsgIDHeader) }
	r := settest.New(id)
	return &setRecorder{r, r.Handler("INSERT INTO effects (key, data)", func(m jetstream.Msg) []any { return []any{id(m), string(m.Data())} })}
}

// With a set handler and no per-message handler: the consumer dies after
// the commit and before the acks; the restarted consumer gets the
// redeliveries and acks them as duplicates without calling the set handler
// again. Every message reaches the set handler once and is applied once.
func TestSetHandlerAppliesOnce(t *testing.T) {
	t.Parallel()
	s, js, cons, e := newEnv(t)
	set := newSetRecorder(e)
	ids := publishAll(t, js, 30)
	// A producer retry inside the duplicate window: dropped by the stream.
	publish(t, js, "orders.created", "order-0", "0")
	committed := crash(t, s, e, nil, idemnats.WithSetHandler(set.handle), idemnats.WithBatchSize(10))
	recoverAll(t, cons, e, nil, committed, len(ids)-committed, idemnats.WithSetHandler(set.handle))
	seen, calls := set.Snapshot()
	consumetest.WantOnce(t, e.Counts(t), seen, ids)
	if calls >= len(ids) {
		t.Errorf("set handler called %d times for %d messages: not batched", calls, len(ids))
	}
	wantAllAcked(t, js)
}

// A group holding a poison message makes the set handler fail; the group is
// run again message by message with the Handler, which isolates the poison
// message: it is nak'd, redelivered and dead-lettered at the delivery
// limit, while the others commit once and are acked.
func TestSetHandlerPoisonFallback(t *testing.T) {
	t.Parallel()
	_, js, cons, e := newEnv(t)
	set := newSetRecorder(e)
	poison := consumetest.NewPoison(msgID)
	set.Fail = poison.Fail
	each := poison.Handler(e.apply)
	for _, id := range consumetest.PoisonIDs {
		publish(t, js, "orders.created", id, id)
	}
	var ev events
	c, err := idemnats.NewConsumer(cons, e.In, each, idemnats.WithSetHandler(set.handle),
		idemnats.WithMaxAttempts(3), idemnats.WithBackoff(10*time.Millisecond, 40*time.Millisecond),
		idemnats.WithDeadLetter(js, "dlq.orders"), idemnats.WithObserver(ev.Observe), idemnats.WithMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := start(c)
	waitFor(t, 20*time.Second, "the dead letter", func() bool { return ev.Count(idem.DeadLettered) == 1 })
	waitFor(t, 5*time.Second, "acks", func() bool { return consumerInfo(t, js).NumAckPending == 0 })
	if err := r.Stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	poison.Check(t, e.Effects, &ev, 3)
	dlq, err := js.OrderedConsumer(context.Background(), "DLQ", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := dlq.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if h := m.Headers(); string(m.Data()) != "poison" || h.Get(idemnats.HeaderReason) != string(idem.ReasonMaxAttempts) || h.Get(idemnats.HeaderNumDelivered) != "3" {
		t.Errorf("dead letter %q, headers %v", m.Data(), h)
	}
}

// A set handler without a per-message handler that fails fails the whole
// group: nothing is applied or acked, every message is nak'd and
// redelivered, and none is dead-lettered for it, even past the delivery
// limit. Once the handler works, each message is applied once.
func TestSetHandlerNoFallback(t *testing.T) {
	t.Parallel()
	_, js, cons, e := newEnv(t)
	set := newSetRecorder(e)
	broken := consumetest.NewBroken[jetstream.Msg]()
	set.Fail = broken.Fail
	ids := publishAll(t, js, 6)
	var ev events
	c, err := idemnats.NewConsumer(cons, e.In, nil, idemnats.WithSetHandler(set.handle),
		idemnats.WithMaxAttempts(2), idemnats.WithBackoff(10*time.Millisecond, 20*time.Millisecond),
		idemnats.WithDeadLetter(js, "dlq.orders"), idemnats.WithObserver(ev.Observe), idemnats.WithMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := start(c)
	waitFor(t, 20*time.Second, "three rounds of redeliveries", func() bool { return ev.Count(idem.Retried) >= 3*len(ids) })
	info := consumerInfo(t, js)
	if info.AckFloor.Consumer != 0 {
		t.Fatalf("while the set handler fails: ack floor %d, want 0", info.AckFloor.Consumer)
	}
	consumetest.WantNothingApplied(t, e.Effects, &ev, nil)

	broken.Fix()
	waitFor(t, 20*time.Second, "all applied", func() bool { return ev.Count(idem.Applied) == len(ids) })
	waitFor(t, 5*time.Second, "acks", func() bool { return consumerInfo(t, js).NumAckPending == 0 })
	if err := r.Stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	consumetest.WantAllAppliedOnce(t, e.Effects, &ev, ids)
}
