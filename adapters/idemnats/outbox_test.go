package idemnats_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/outbox"
	"github.com/idem-go/idem/sqldialect"
)

// A relay that dies after publishing in every other round republishes its
// batches; the stream's duplicate window keeps one copy of each message.
func TestOutboxPublisher(t *testing.T) {
	_, js, _, _ := newEnv(t)
	ctx := context.Background()
	db := testenv.SQLite(t)
	ob, _ := outbox.New(sqldialect.SQLite)
	if err := ob.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	tx, _ := db.BeginTx(ctx, nil)
	for i := 0; i < 20; i++ {
		if _, err := ob.Add(ctx, tx, outbox.Message{ID: fmt.Sprint("evt-", i), Topic: "orders.created", OrderingKey: fmt.Sprint("order-", i%3), Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	p, err := idemnats.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	pub := p.OutboxPublisher()
	rounds, published := 0, 0
	relay, _ := outbox.NewRelay(db, ob, outbox.PublisherFunc(func(ctx context.Context, msgs []outbox.Message) error {
		if err := pub.Publish(ctx, msgs); err != nil {
			return err
		}
		published += len(msgs)
		rounds++
		if rounds%2 == 1 {
			return errors.New("relay died before marking")
		}
		return nil
	}), outbox.WithBatch(7))
	for {
		n, err := relay.RunOnce(ctx)
		if err == nil && n == 0 {
			break
		}
	}
	info, err := js.Stream(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().State.Msgs; got != 20 || published <= 20 {
		t.Fatalf("stream holds %d messages after %d publications; want 20 and more than 20", got, published)
	}
}
