package idemnats_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/inbox"
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
	set.Fail = func(msgs []jetstream.Msg) error {
		for _, m := range msgs {
			if m.Headers().Get(jetstream.MsgIDHeader) == "poison" {
				return errors.New("group holds poison")
			}
		}
		return nil
	}
	var poisonRuns atomic.Int32
	each := func(ctx context.Context, tx *sql.Tx, m jetstream.Msg) error {
		if m.Headers().Get(jetstream.MsgIDHeader) == "poison" {
			poisonRuns.Add(1)
			return errors.New("cannot parse amount")
		}
		return e.apply(ctx, tx, m)
	}
	for _, id := range []string{"good-1", "good-2", "poison", "good-3", "good-4"} {
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
		t.Errorf("the Handler ran %d times on the poison message, want 3 (one per delivery)", n)
	}
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
	var broken atomic.Bool
	broken.Store(true)
	set.Fail = func([]jetstream.Msg) error {
		if broken.Load() {
			return errors.New("set broken")
		}
		return nil
	}
	const n = 6
	for i := range n {
		publish(t, js, "orders.created", fmt.Sprintf("order-%d", i), fmt.Sprint(i))
	}
	var ev events
	c, err := idemnats.NewConsumer(cons, e.In, nil, idemnats.WithSetHandler(set.handle),
		idemnats.WithMaxAttempts(2), idemnats.WithBackoff(10*time.Millisecond, 20*time.Millisecond),
		idemnats.WithDeadLetter(js, "dlq.orders"), idemnats.WithObserver(ev.Observe), idemnats.WithMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := start(c)
	waitFor(t, 20*time.Second, "three rounds of redeliveries", func() bool { return ev.Count(idem.Retried) >= 3*n })
	info := consumerInfo(t, js)
	if info.AckFloor.Consumer != 0 || len(e.Counts(t)) != 0 || ev.Count(idem.Applied) != 0 || ev.Count(idem.DeadLettered) != 0 {
		t.Fatalf("while the set handler fails: ack floor %d, effects %v, applied %d, dead-lettered %d; want nothing",
			info.AckFloor.Consumer, e.Counts(t), ev.Count(idem.Applied), ev.Count(idem.DeadLettered))
	}
	ev.Each(func(x idemnats.Event) {
		var he *inbox.HandlerError
		if !errors.As(x.Err, &he) {
			t.Errorf("retried event error %v, want an *inbox.HandlerError", x.Err)
		}
	})

	broken.Store(false)
	waitFor(t, 20*time.Second, "all applied", func() bool { return ev.Count(idem.Applied) == n })
	waitFor(t, 5*time.Second, "acks", func() bool { return consumerInfo(t, js).NumAckPending == 0 })
	if err := r.Stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	got := e.Counts(t)
	for i := range n {
		if k := fmt.Sprintf("order-%d", i); got[k] != 1 {
			t.Errorf("%s applied %d times, want 1", k, got[k])
		}
	}
	if ev.Count(idem.DeadLettered) != 0 {
		t.Errorf("%d dead-lettered, want 0", ev.Count(idem.DeadLettered))
	}
}
