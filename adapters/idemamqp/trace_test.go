package idemamqp_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idem-go/idem/adapters/idemamqp"
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	"github.com/idem-go/idem/adapters/internal/consume/spantest"
)

// Each delivery's span links to the producer whose traceparent it carries
// (beside headers that are not strings), the inbox transaction nests under
// the group's span, the copy ends duplicate, the handler error retried
// (requeued), and no span holds a key.
func TestTrace(t *testing.T) {
	t.Parallel()
	conn, tp, e := newEnv(t)
	rec := spantest.New(t)
	producer, parent := rec.Producer("orders publish")
	for _, id := range consumetest.TracedKeys {
		msg := amqp.Publishing{MessageId: id, Body: []byte(id),
			Headers: amqp.Table{"traceparent": parent, "x-priority": int32(7), "x-tags": []any{"a"}}}
		if err := tp.ch.PublishWithContext(context.Background(), "", tp.queue, false, false, msg); err != nil {
			t.Fatal(err)
		}
	}
	in := e.Traced(t, rec.Tracer)
	var ev events
	c, err := idemamqp.NewConsumer(conn, tp.queue, in, e.applyAfter(consumetest.FailFirst(messageID, 2)),
		idemamqp.WithBackoff(10*time.Millisecond, 40*time.Millisecond), idemamqp.WithObserver(ev.Observe),
		idemamqp.WithTracer(rec.Tracer))
	if err != nil {
		t.Fatal(err)
	}
	consumetest.RunTraced(t, c.Run, &ev)
	rec.Check(t, spantest.Want{Producer: producer, Applied: consumetest.TracedKey, Failing: consumetest.FailingKey, Under: "idem.inbox.", System: "rabbitmq"})
}
