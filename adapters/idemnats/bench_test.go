package idemnats_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testsupport/natsenv"
)

// BenchmarkConsume compares, on one embedded server in one run, the raw
// pull-and-ack rate (Fetch + Ack, or the Messages iterator + Ack; no
// database) with the Consumer applying every message through a SQLite inbox
// (ProcessBatch per group; "effect": an INSERT per message in the same
// transaction, "noop": the key only) and acking after the commit. The
// "set-" variants use WithSetHandler (ProcessBatchSet; the effect is one
// multi-row INSERT per group); "random-keys" and "ordered-keys" publish
// UUIDv4-like and UUIDv7-like (time-ordered) Nats-Msg-Ids instead of
// "order-<i>".
//
//	go test -run '^$' -bench Consume -benchtime 20000x ./adapters/idemnats
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
		b.ReportMetric(float64(b.N)/rawMessages(b, cons, b.N, 2*batch).Seconds(), "msgs/s")
	})
	for _, v := range consumetest.Variants(batch) {
		b.Run(v.Name, func(b *testing.B) {
			_, js, cons := benchSetup(b)
			e := newEffects(b)
			fillKeys(b, js, b.N, v.Key)
			consumetest.Rate(b, func(observe func(idemnats.Event)) func(context.Context) error {
				handler, opts := e.apply, []idemnats.Option{idemnats.WithBatchSize(v.Size), idemnats.WithObserver(observe)}
				switch {
				case v.Set:
					handler, opts = nil, append(opts, idemnats.WithSetHandler(setInsert))
				case !v.Effect:
					handler = func(context.Context, *sql.Tx, jetstream.Msg) error { return nil }
				}
				c, err := idemnats.NewConsumer(cons, e.In, handler, opts...)
				if err != nil {
					b.Fatal(err)
				}
				return c.Run
			})
		})
	}
}

func benchSetup(b *testing.B) (*nats.Conn, jetstream.JetStream, jetstream.Consumer) {
	var url string
	if os.Getenv(natsenv.ServerCPUsEnv) != "" {
		// A server process on the CPUs named there, apart from this
		// binary's (run it under taskset): the broker's work does not
		// take the consumer's and the store's core.
		url = natsenv.RunProcess(b, b.TempDir())
	} else {
		url = natsenv.Run(b, b.TempDir(), -1).ClientURL()
	}
	nc, js := natsenv.Connect(b, url)
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
func fill(b *testing.B, js jetstream.JetStream, n int) { fillKeys(b, js, n, nil) }

// fillKeys is fill with the message ids key(i) (nil: "order-<i>").
func fillKeys(b *testing.B, js jetstream.JetStream, n int, key func(int) string) {
	b.Helper()
	if key == nil {
		key = func(i int) string { return fmt.Sprintf("order-%d", i) }
	}
	data := make([]byte, 100)
	for i := range n {
		msg := &nats.Msg{Subject: "orders.created", Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, key(i))
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

// rawMessages consumes n messages from cons with the plain client's
// Messages iterator (pulls of up to buffer messages), acking each, and
// returns the time it took.
func rawMessages(b *testing.B, cons jetstream.Consumer, n, buffer int) time.Duration {
	b.Helper()
	start := time.Now()
	it, err := cons.Messages(jetstream.PullMaxMessages(buffer))
	if err != nil {
		b.Fatal(err)
	}
	defer it.Stop()
	for range n {
		m, err := it.Next()
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Ack(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// rawConsume consumes n messages from cons with the plain client's Consume
// (pulls of up to buffer messages, the API the Consumer uses), acking each
// in the callback, and returns the time it took.
func rawConsume(b *testing.B, cons jetstream.Consumer, n, buffer int) time.Duration {
	b.Helper()
	start := time.Now()
	done := make(chan struct{})
	errs := make(chan error, 1)
	got := 0
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if got == n {
			return // beyond n: left unacked, as the iterator leaves them
		}
		if err := m.Ack(); err != nil {
			select {
			case errs <- err:
			default:
			}
		}
		if got++; got == n {
			close(done)
		}
	}, jetstream.PullMaxMessages(buffer))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Stop()
	select {
	case <-done:
	case err := <-errs:
		b.Fatal(err)
	}
	return time.Since(start)
}

// setInsert is the set handler of the benchmark: e.apply's INSERT as one
// multi-row statement per group.
var setInsert = consumetest.SetInsert(msgID, msgData)

// BenchmarkConsumeVsStore is the speed check of the Consumer: consume →
// inbox (WithSetHandler, one multi-row INSERT per group, SQLite WAL file) →
// ack, against the same records (same ids, same payload) fed straight into
// a fresh inbox of the same kind with inbox.ProcessBatchSet and the same
// statement, in exactly the group sizes the Consumer formed, with no broker
// at all (consumetest.StoreOnly). The two alternate in every iteration, so
// the machine's load hits them alike; the log line and the consumer/store
// metric give the ratio. A third side consumes and acks the same records
// with the plain client's Consume, the API the Consumer uses (rawConsume):
// consumer/bound compares the consumer with an adapter that would cost
// nothing beyond nats.go itself.
//
//	go test -run '^$' -bench ConsumeVsStore -benchtime 5x ./adapters/idemnats
//
// With the broker on a core of its own (a server process, not embedded),
// the consumer and the store on the other:
//
//	IDEM_TEST_SERVER_CPUS=1 taskset -c 0 go test -run '^$' -bench ConsumeVsStore -benchtime 5x ./adapters/idemnats
func BenchmarkConsumeVsStore(b *testing.B) {
	const n, batch = 20000, 500
	var cons jetstream.Consumer
	publish := func(keys []string, payload []byte) {
		var js jetstream.JetStream
		_, js, cons = benchSetup(b)
		fillKeys(b, js, len(keys), func(i int) string { return keys[i] })
	}
	consumetest.VsStore(b, n, msgID, msgData, publish, func(in *inbox.Inbox, set func(context.Context, *sql.Tx, []jetstream.Msg) error, observe func(idemnats.Event)) func(context.Context) error {
		c, err := idemnats.NewConsumer(cons, in, nil, idemnats.WithBatchSize(batch), idemnats.WithSetHandler(set), idemnats.WithObserver(observe))
		if err != nil {
			b.Fatal(err)
		}
		return c.Run
	}, func(n int) time.Duration { return rawConsume(b, cons, n, 2*batch) })
}
