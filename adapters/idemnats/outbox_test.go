package idemnats_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/internal/consume/consumetest"
	"github.com/idem-go/idem/outbox"
)

// A relay that dies after publishing in every other round republishes its
// batches; the stream's duplicate window keeps one copy of each message.
func TestOutboxPublisher(t *testing.T) {
	_, js, _, _ := newEnv(t)
	ctx := context.Background()
	p, err := idemnats.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []outbox.Message
	for i := range 20 {
		msgs = append(msgs, outbox.Message{ID: fmt.Sprint("evt-", i), Topic: "orders.created", OrderingKey: fmt.Sprint("order-", i%3), Payload: []byte("{}")})
	}
	published := consumetest.Relay(t, msgs, 7, p.OutboxPublisher(), func(round int) bool { return round%2 == 1 })
	info, err := js.Stream(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().State.Msgs; got != 20 || published <= 20 {
		t.Fatalf("stream holds %d messages after %d publications; want 20 and more than 20", got, published)
	}
}
