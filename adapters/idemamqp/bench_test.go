package idemamqp_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/adapters/idemamqp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// BenchmarkConsume compares, on one broker in one run, the raw consume rate
// (basic.consume with the same prefetch, no database; an ack per delivery,
// or one multiple-ack per 500 as the Consumer does for a clean group)
// with the Consumer applying every delivery through a SQLite inbox
// (ProcessBatch per group; "effect": an INSERT per delivery in the same
// transaction, "noop": the key only) and acking after the commit.
func BenchmarkConsume(b *testing.B) {
	const prefetch, batch = 1000, 500
	for _, ackEvery := range []int{1, batch} {
		b.Run(fmt.Sprintf("raw-consume-ack-every-%d", ackEvery), func(b *testing.B) {
			conn := dial(b)
			tp := newTopology(b, conn, nil)
			fill(b, conn, tp.queue, b.N)
			ch, err := conn.Channel()
			if err != nil {
				b.Fatal(err)
			}
			defer ch.Close()
			if err := ch.Qos(prefetch, 0, false); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			deliveries, err := ch.Consume(tp.queue, "", false, false, false, false, nil)
			if err != nil {
				b.Fatal(err)
			}
			for i := range b.N {
				d := <-deliveries
				if (i+1)%ackEvery == 0 || i == b.N-1 {
					if err := d.Ack(ackEvery > 1); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		})
	}
	noop := func(context.Context, *sql.Tx, amqp.Delivery) error { return nil }
	for _, bc := range []struct {
		name   string
		size   int
		effect bool
	}{{"inbox-batch-1-effect", 1, true}, {"inbox-batch-500-effect", batch, true}, {"inbox-batch-500-noop", batch, false}} {
		b.Run(bc.name, func(b *testing.B) {
			conn := dial(b)
			tp := newTopology(b, conn, nil)
			e := newEffects(b)
			fill(b, conn, tp.queue, b.N)
			handler := noop
			if bc.effect {
				handler = e.apply
			}
			var settled atomic.Int64
			done := make(chan struct{})
			c, err := idemamqp.NewConsumer(conn, tp.queue, e.in, handler, idemamqp.WithPrefetch(prefetch), idemamqp.WithBatchSize(bc.size),
				idemamqp.WithObserver(func(idemamqp.Event) {
					if settled.Add(1) == int64(b.N) {
						close(done)
					}
				}))
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			r := startRun(c)
			<-done
			elapsed := time.Since(start)
			r.cancel()
			<-r.done
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}

func startRun(c *idemamqp.Consumer) *runner { return start(c) }

// fill publishes n messages with distinct message-ids, confirmed.
func fill(b *testing.B, conn *amqp.Connection, queue string, n int) {
	b.Helper()
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
			amqp.Publishing{MessageId: fmt.Sprintf("order-%d", i), Body: body, DeliveryMode: amqp.Persistent})
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
