package idemamqp_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idem-go/idem/adapters/idemamqp"
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	"github.com/idem-go/idem/inbox"
)

// BenchmarkConsume compares, on one broker in one run, the raw consume rate
// (basic.consume with the same prefetch, no database; an ack per delivery,
// or one multiple-ack per 500 as the Consumer does for a clean group)
// with the Consumer applying every delivery through a SQLite inbox
// (ProcessBatch per group; "effect": an INSERT per delivery in the same
// transaction, "noop": the key only) and acking after the commit. The
// "set-" variants use WithSetHandler (ProcessBatchSet; the effect is one
// multi-row INSERT per group); "random-keys" and "ordered-keys" publish
// UUIDv4-like and UUIDv7-like (time-ordered) message-ids instead of
// "order-<i>".
//
//	go test -run '^$' -bench Consume -benchtime 20000x ./adapters/idemamqp
func BenchmarkConsume(b *testing.B) {
	const prefetch, batch = 1000, 500
	for _, ackEvery := range []int{1, batch} {
		b.Run(fmt.Sprintf("raw-consume-ack-every-%d", ackEvery), func(b *testing.B) {
			conn := dial(b)
			tp := newTopology(b, conn, nil)
			fill(b, conn, tp.queue, b.N)
			b.ResetTimer()
			b.ReportMetric(float64(b.N)/rawConsume(b, conn, tp.queue, b.N, prefetch, ackEvery).Seconds(), "msgs/s")
		})
	}
	for _, v := range consumetest.Variants(batch) {
		b.Run(v.Name, func(b *testing.B) {
			conn := dial(b)
			tp := newTopology(b, conn, nil)
			e := newEffects(b)
			fillKeys(b, conn, tp.queue, b.N, v.Key)
			consumetest.Rate(b, func(observe func(idemamqp.Event)) func(context.Context) error {
				handler, opts := e.apply, []idemamqp.Option{idemamqp.WithPrefetch(prefetch), idemamqp.WithBatchSize(v.Size), idemamqp.WithObserver(observe)}
				switch {
				case v.Set:
					handler, opts = nil, append(opts, idemamqp.WithSetHandler(setInsert))
				case !v.Effect:
					handler = func(context.Context, *sql.Tx, amqp.Delivery) error { return nil }
				}
				c, err := idemamqp.NewConsumer(conn, tp.queue, e.In, handler, opts...)
				if err != nil {
					b.Fatal(err)
				}
				return c.Run
			})
		})
	}
}

// fill publishes n messages with distinct message-ids, confirmed.
func fill(b *testing.B, conn *amqp.Connection, queue string, n int) { fillKeys(b, conn, queue, n, nil) }

// fillKeys is fill with the message-ids key(i) (nil: "order-<i>").
func fillKeys(b *testing.B, conn *amqp.Connection, queue string, n int, key func(int) string) {
	b.Helper()
	if key == nil {
		key = func(i int) string { return fmt.Sprintf("order-%d", i) }
	}
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	body := make([]byte, 100)
	var last *amqp.DeferredConfirmation
	for i := range n {
		last, err = ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false,
			amqp.Publishing{MessageId: key(i), Body: body, DeliveryMode: amqp.Persistent})
		if err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 || i == n-1 {
			if ok, err := last.WaitContext(ctx); err != nil || !ok {
				b.Fatalf("confirm: %v %v", ok, err)
			}
		}
	}
}

// rawConsume consumes n messages from queue with the plain client on a
// channel of its own (prefetch unacked at most), acking every ackEvery-th
// with multiple set (and the last), and returns the time it took.
func rawConsume(b *testing.B, conn *amqp.Connection, queue string, n, prefetch, ackEvery int) time.Duration {
	b.Helper()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		d := <-deliveries
		if (i+1)%ackEvery == 0 || i == n-1 {
			if err := d.Ack(ackEvery > 1); err != nil {
				b.Fatal(err)
			}
		}
	}
	return time.Since(start)
}

// setInsert is the set handler of the benchmark: e.apply's INSERT as one
// multi-row statement per group.
var setInsert = consumetest.SetInsert(messageID, body)

// BenchmarkConsumeVsStore is the speed check of the Consumer: consume →
// inbox (WithSetHandler, one multi-row INSERT per group, SQLite WAL file) →
// ack, against the same records (same ids, same payload) fed straight into
// a fresh inbox of the same kind with inbox.ProcessBatchSet and the same
// statement, in exactly the group sizes the Consumer formed, with no broker
// at all (consumetest.StoreOnly). The two alternate in every iteration, so
// the machine's load hits them alike; the log line and the consumer/store
// metric give the ratio. A third side consumes the same records with the
// plain client, one multiple-ack per batch (rawConsume): consumer/bound
// compares the consumer with an adapter that would cost nothing beyond
// amqp091-go itself.
//
//	go test -run '^$' -bench ConsumeVsStore -benchtime 5x ./adapters/idemamqp
//
// With RabbitMQ on a core of its own, the consumer and the store on the
// other:
//
//	IDEM_TEST_SERVER_CPUS=1 taskset -c 0 go test -run '^$' -bench ConsumeVsStore -benchtime 5x ./adapters/idemamqp
func BenchmarkConsumeVsStore(b *testing.B) {
	const n, prefetch, batch = 20000, 1000, 500
	conn := dial(b)
	var queue string
	publish := func(keys []string, payload []byte) {
		queue = newTopology(b, conn, nil).queue
		fillKeys(b, conn, queue, len(keys), func(i int) string { return keys[i] })
	}
	consumetest.VsStore(b, n, messageID, body, publish, func(in *inbox.Inbox, set func(context.Context, *sql.Tx, []amqp.Delivery) error, observe func(idemamqp.Event)) func(context.Context) error {
		c, err := idemamqp.NewConsumer(conn, queue, in, nil, idemamqp.WithPrefetch(prefetch), idemamqp.WithBatchSize(batch),
			idemamqp.WithSetHandler(set), idemamqp.WithObserver(observe))
		if err != nil {
			b.Fatal(err)
		}
		return c.Run
	}, func(n int) time.Duration { return rawConsume(b, conn, queue, n, prefetch, batch) })
}
