package idemnats_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	"github.com/idem-go/idem/adapters/internal/consume/spantest"
)

// orderHeader keys the tracing test's messages: JetStream itself would drop
// a second publish with the same Nats-Msg-Id, so the copy is told apart
// by an Order-Id header.
func orderHeader(m jetstream.Msg) string { return m.Headers().Get("Order-Id") }

// Each message's span links to the producer whose traceparent it carries,
// the inbox transaction nests under the group's span, the copy ends
// duplicate, the handler error retried (nak'd, redelivered), and no span
// holds a key.
func TestTrace(t *testing.T) {
	t.Parallel()
	_, js, cons, e := newEnv(t)
	rec := spantest.New(t)
	producer, tp := rec.Producer("orders publish")
	for i, id := range consumetest.TracedKeys {
		h := nats.Header{}
		h.Set("Order-Id", id)
		h.Set("traceparent", tp)
		h.Set(jetstream.MsgIDHeader, id+"/"+string(rune('a'+i)))
		if _, err := js.PublishMsg(context.Background(), &nats.Msg{Subject: "orders.new", Data: []byte(id), Header: h}); err != nil {
			t.Fatal(err)
		}
	}
	in := e.Traced(t, rec.Tracer)
	apply := func(ctx context.Context, tx *sql.Tx, m jetstream.Msg) error {
		return e.Apply(ctx, tx, orderHeader(m), msgData(m))
	}
	var ev events
	c, err := idemnats.NewConsumer(cons, in, consumetest.ApplyAfter(apply, consumetest.FailFirst(orderHeader, 2)),
		idemnats.WithKey(func(m jetstream.Msg) (string, error) { return orderHeader(m), nil }),
		idemnats.WithBackoff(10*time.Millisecond, 40*time.Millisecond), idemnats.WithObserver(ev.Observe),
		idemnats.WithTracer(rec.Tracer))
	if err != nil {
		t.Fatal(err)
	}
	consumetest.RunTraced(t, c.Run, &ev)
	rec.Check(t, spantest.Want{Producer: producer, Applied: consumetest.TracedKey, Failing: consumetest.FailingKey, Under: "idem.inbox.", System: "nats"})
}
