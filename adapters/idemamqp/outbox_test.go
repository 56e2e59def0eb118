package idemamqp_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idem-go/idem/adapters/idemamqp"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/outbox"
	"github.com/idem-go/idem/sqldialect"
)

// A relay that dies after publishing in its first round republishes that
// batch: RabbitMQ holds the copies, each with the outbox id as message-id,
// so the consumer's inbox can drop them.
func TestOutboxPublisher(t *testing.T) {
	conn := dial(t)
	tp := newTopology(t, conn, nil)
	ctx := context.Background()
	db := testenv.SQLite(t)
	ob, _ := outbox.New(sqldialect.SQLite)
	if err := ob.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	tx, _ := db.BeginTx(ctx, nil)
	for i := 0; i < 6; i++ {
		if _, err := ob.Add(ctx, tx, outbox.Message{ID: fmt.Sprint("evt-", i), Topic: tp.queue, OrderingKey: "k", Payload: []byte("{}"), Headers: map[string]string{"type": "created"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	p, err := idemamqp.NewPublisher(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pub := p.OutboxPublisher("")
	rounds := 0
	relay, _ := outbox.NewRelay(db, ob, outbox.PublisherFunc(func(ctx context.Context, msgs []outbox.Message) error {
		if err := pub.Publish(ctx, msgs); err != nil {
			return err
		}
		rounds++
		if rounds == 1 {
			return errors.New("relay died before marking")
		}
		return nil
	}), outbox.WithBatch(4))
	for {
		n, err := relay.RunOnce(ctx)
		if err == nil && n == 0 {
			break
		}
	}
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
