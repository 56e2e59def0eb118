package idemnats_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/inbox"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkConsume compares, on one embedded server in one run, the raw
// pull-and-ack rate (Fetch + Ack, or the Messages iterator + Ack; no
// database) with the Consumer applying every message through a SQLite inbox
// (ProcessBatch per group; "effect": an INSERT per message in the same
// transaction, "noop": the key only) and acking after the commit.
func BenchmarkConsume(b *testing.B) {
	const batch = 500
	b.Run("raw-fetch-ack", func(b *testing.B) {
		_, js, cons := benchSetup(b)
		fill(b, js, b.N)
		b.ResetTimer()
		start := time.Now()
		got := 0
		for got < b.N {
			mb, err := cons.Fetch(batch, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				b.Fatal(err)
			}
			for m := range mb.Messages() {
				if err := m.Ack(); err != nil {
					b.Fatal(err)
				}
				got++
			}
			if err := mb.Error(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	})
	b.Run("raw-messages-ack", func(b *testing.B) {
		_, js, cons := benchSetup(b)
		fill(b, js, b.N)
		b.ResetTimer()
		start := time.Now()
		it, err := cons.Messages(jetstream.PullMaxMessages(2 * batch))
		if err != nil {
			b.Fatal(err)
		}
		defer it.Stop()
		for range b.N {
			m, err := it.Next()
			if err != nil {
				b.Fatal(err)
			}
			if err := m.Ack(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	})
	b.Run("db-only-processbatch-500-effect", func(b *testing.B) {
		// The inbox alone, no broker: the ceiling the Consumer can reach.
		e := newEffects(b)
		msgs := make([]inbox.Message, 0, batch)
		apply := func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO effects (key, data) VALUES (?, ?)", m.Key, "x")
			return err
		}
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; {
			msgs = msgs[:0]
			for ; i < b.N && len(msgs) < batch; i++ {
				msgs = append(msgs, inbox.Message{Key: fmt.Sprintf("order-%d", i)})
			}
			if _, err := e.in.ProcessBatch(context.Background(), msgs, apply); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	})
	noop := func(context.Context, *sql.Tx, jetstream.Msg) error { return nil }
	for _, bc := range []struct {
		name   string
		size   int
		effect bool
		runs   int
	}{
		{"inbox-batch-1-effect", 1, true, 1}, {"inbox-batch-500-effect", batch, true, 1},
		{"inbox-batch-500-noop", batch, false, 1},
	} {
		size := bc.size
		b.Run(bc.name, func(b *testing.B) {
			_, js, cons := benchSetup(b)
			e := newEffects(b)
			fill(b, js, b.N)
			var settled atomic.Int64
			done := make(chan struct{})
			handler := noop
			if bc.effect {
				handler = e.apply
			}
			c, err := idemnats.NewConsumer(cons, e.in, handler, idemnats.WithBatchSize(size),
				idemnats.WithObserver(func(idemnats.Event) {
					if settled.Add(1) == int64(b.N) {
						close(done)
					}
				}))
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			var rs []*runner
			for range bc.runs {
				rs = append(rs, startRun(c))
			}
			<-done
			elapsed := time.Since(start)
			for _, r := range rs {
				r.cancel()
				<-r.done
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}

func startRun(c *idemnats.Consumer) *runner { return start(c) }

func benchSetup(b *testing.B) (*nats.Conn, jetstream.JetStream, jetstream.Consumer) {
	s := runServer(b, b.TempDir(), -1)
	nc, js := connect(b, s.ClientURL())
	setup(b, js)
	// The default AckWait (30s): under load, a buffered message must not be
	// redelivered before its turn comes.
	cons, err := js.CreateOrUpdateConsumer(context.Background(), "ORDERS", jetstream.ConsumerConfig{
		Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: -1,
	})
	if err != nil {
		b.Fatal(err)
	}
	return nc, js, cons
}

// fill publishes n messages with distinct ids, asynchronously.
func fill(b *testing.B, js jetstream.JetStream, n int) {
	b.Helper()
	data := make([]byte, 100)
	for i := range n {
		msg := &nats.Msg{Subject: "orders.created", Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("order-%d", i))
		if _, err := js.PublishMsgAsync(msg); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 || i == n-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("publish did not complete")
			}
		}
	}
}
