package idemnats_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/settest"
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
		set    bool             // WithSetHandler(setInsert), no per-message handler
		key    func(int) string // message ids; nil: "order-<i>"
	}{
		{name: "inbox-batch-1-effect", size: 1, effect: true, runs: 1},
		{name: "inbox-batch-500-effect", size: batch, effect: true, runs: 1},
		{name: "inbox-batch-500-noop", size: batch, runs: 1},
		// Key shapes: random (UUIDv4-like) and time-ordered (UUIDv7-like)
		// ids, per-message handler and set handler.
		{name: "inbox-batch-500-effect-random-keys", size: batch, effect: true, runs: 1, key: randomID},
		{name: "inbox-batch-500-effect-ordered-keys", size: batch, effect: true, runs: 1, key: timeOrderedID},
		{name: "set-batch-500-effect-random-keys", size: batch, effect: true, runs: 1, set: true, key: randomID},
		{name: "set-batch-500-effect-ordered-keys", size: batch, effect: true, runs: 1, set: true, key: timeOrderedID},
	} {
		size := bc.size
		b.Run(bc.name, func(b *testing.B) {
			_, js, cons := benchSetup(b)
			e := newEffects(b)
			fillKeys(b, js, b.N, bc.key)
			var settled atomic.Int64
			done := make(chan struct{})
			handler := noop
			if bc.effect {
				handler = e.apply
			}
			opts := []idemnats.Option{idemnats.WithBatchSize(size),
				idemnats.WithObserver(func(idemnats.Event) {
					if settled.Add(1) == int64(b.N) {
						close(done)
					}
				})}
			if bc.set {
				handler = nil
				opts = append(opts, idemnats.WithSetHandler(setInsert))
			}
			c, err := idemnats.NewConsumer(cons, e.in, handler, opts...)
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

// setInsert is the set handler of the benchmark: e.apply's INSERT as one
// multi-row statement per group.
func setInsert(ctx context.Context, tx *sql.Tx, msgs []jetstream.Msg) error {
	return settest.Insert(ctx, tx, "INSERT INTO effects (key, data)", msgs, func(m jetstream.Msg) []any {
		return []any{m.Headers().Get(jetstream.MsgIDHeader), string(m.Data())}
	})
}

// randomID returns a random (version 4) UUID as canonical text.
func randomID(int) string { return uuid.NewString() }

// timeOrderedID returns a version 7 UUID (RFC 9562: Unix milliseconds
// first) as canonical text: ids made later sort later.
func timeOrderedID(int) string { return uuid.Must(uuid.NewV7()).String() }
