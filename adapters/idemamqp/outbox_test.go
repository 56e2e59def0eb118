package idemamqp_test

import (
	"fmt"
	"testing"

	"github.com/idem-go/idem/adapters/idemamqp"
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	"github.com/idem-go/idem/outbox"
)

// A relay that dies after publishing in its first round republishes that
// batch: RabbitMQ holds the copies, each with the outbox id as message-id,
// so the consumer's inbox can drop them.
func TestOutboxPublisher(t *testing.T) {
	conn := dial(t)
	tp := newTopology(t, conn, nil)
	p := newPublisher(t, conn)
	var msgs []outbox.Message
	for i := range 6 {
		msgs = append(msgs, outbox.Message{ID: fmt.Sprint("evt-", i), Topic: tp.queue, OrderingKey: "k", Payload: []byte("{}"), Headers: map[string]string{"type": "created"}})
	}
	consumetest.Relay(t, msgs, 4, p.OutboxPublisher(""), func(round int) bool { return round == 1 })
	seen := map[string]int{}
	for {
		d, ok, err := tp.ch.Get(tp.queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		seen[d.MessageId]++
		if d.Headers["type"] != "created" || d.Headers[idemamqp.HeaderOutboxSeq] == nil {
			t.Fatalf("headers %v", d.Headers)
		}
	}
	if len(seen) != 6 || seen["evt-0"] != 2 || seen["evt-5"] != 1 {
		t.Fatalf("deliveries by message-id %v: want 6 ids, the first batch twice", seen)
	}
}
