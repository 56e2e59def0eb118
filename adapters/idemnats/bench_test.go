package idemnats_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
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
	for lo := 0; lo < len(msgs); lo += 500 {
		chunk := msgs[lo:min(lo+500, len(msgs))]
		q := "INSERT INTO effects (key, data) VALUES " + strings.Repeat("(?, ?), ", len(chunk)-1) + "(?, ?)"
		args := make([]any, 0, 2*len(chunk))
		for _, m := range chunk {
			args = append(args, m.Headers().Get(jetstream.MsgIDHeader), string(m.Data()))
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}

// randomID returns a random UUIDv4-shaped id as canonical text.
func randomID(int) string {
	var u [16]byte
	binary.BigEndian.PutUint64(u[:8], rand.Uint64())
	binary.BigEndian.PutUint64(u[8:], rand.Uint64())
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // variant 10
	return uuidText(u)
}

// timeOrderedID returns a UUIDv7-shaped id (RFC 9562 layout: 48-bit Unix
// millisecond timestamp, version 7, variant bits, random rest) as canonical
// text: ids made later sort later, to the millisecond.
func timeOrderedID(int) string {
	var u [16]byte
	ms := uint64(time.Now().UnixMilli())
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	binary.BigEndian.PutUint16(u[6:], uint16(rand.Uint32()))
	binary.BigEndian.PutUint64(u[8:], rand.Uint64())
	u[6] = u[6]&0x0f | 0x70 // version 7
	u[8] = u[8]&0x3f | 0x80 // variant 10
	return uuidText(u)
}

func uuidText(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
