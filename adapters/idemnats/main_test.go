package idemnats_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/internal/consume/consumetest"
	"github.com/idem-go/idem/internal/natsenv"
	"github.com/idem-go/idem/internal/settest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestMain(m *testing.M) { consumetest.Main(m) }

// newEnv starts an embedded server with the streams of setup, connects to
// it, and opens an inbox.
func newEnv(t testing.TB) (*server.Server, jetstream.JetStream, jetstream.Consumer, *effects) {
	t.Helper()
	s := natsenv.Run(t, t.TempDir(), -1)
	_, js := natsenv.Connect(t, s.ClientURL())
	return s, js, setup(t, js), newEffects(t)
}

// setup creates stream ORDERS (orders.>) and DLQ (dlq.>) and a durable pull
// consumer "worker" with a short AckWait.
func setup(t testing.TB, js jetstream.JetStream) jetstream.Consumer {
	t.Helper()
	ctx := context.Background()
	for name, subj := range map[string]string{"ORDERS": "orders.>", "DLQ": "dlq.>"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}}); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
		Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return cons
}

// effects is the shared SQLite inbox with an effects table.
type effects struct{ *consumetest.Effects }

func newEffects(t testing.TB) *effects { return &effects{consumetest.NewEffects(t)} }

// msgID is a message's Nats-Msg-Id, the key of every test message.
func msgID(m jetstream.Msg) string { return m.Headers().Get(jetstream.MsgIDHeader) }

func msgData(m jetstream.Msg) string { return string(m.Data()) }

// apply is a handler recording the message's effect.
func (e *effects) apply(ctx context.Context, tx *sql.Tx, m jetstream.Msg) error {
	return e.Apply(ctx, tx, msgID(m), msgData(m))
}

func publish(t testing.TB, js jetstream.JetStream, subject, id, data string) {
	t.Helper()
	msg := &nats.Msg{Subject: subject, Data: []byte(data), Header: nats.Header{}}
	if id != "" {
		msg.Header.Set(jetstream.MsgIDHeader, id)
	}
	if _, err := js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
}

// setRecorder is a set handler writing all its messages' effects with one
// multi-row INSERT, and counting how often each key reached it.
type setRecorder struct {
	*settest.Recorder[jetstream.Msg]
	handle func(context.Context, *sql.Tx, []jetstream.Msg) error
}

func newSetRecorder(*effects) *setRecorder {
	id := func(m jetstream.Msg) string { return m.Headers().Get(jetstream.MsgIDHeader) }
	r := settest.New(id)
	return &setRecorder{r, r.Handler("INSERT INTO effects (key, data)", func(m jetstream.Msg) []any { return []any{id(m), string(m.Data())} })}
}

// applyAfter is a handler that applies a message's effect once before(m)
// returns nil, and fails with its error otherwise.
func (e *effects) applyAfter(before func(jetstream.Msg) error) idemnats.Handler {
	return consumetest.ApplyAfter(e.apply, before)
}

// startDLQ starts a Consumer that dead-letters to dlq.orders at the given
// attempt, with short retry delays, reporting to ev.
func startDLQ(t testing.TB, js jetstream.JetStream, cons jetstream.Consumer, e *effects, h idemnats.Handler, attempts int, ev *events, opts ...idemnats.Option) *consumetest.Runner {
	t.Helper()
	c, err := idemnats.NewConsumer(cons, e.In, h, append([]idemnats.Option{idemnats.WithMaxAttempts(attempts),
		idemnats.WithBackoff(10*time.Millisecond, 40*time.Millisecond), idemnats.WithDeadLetter(js, "dlq.orders"),
		idemnats.WithObserver(ev.Observe), idemnats.WithMaxWait(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return start(c)
}

func start(c *idemnats.Consumer) *consumetest.Runner { return consumetest.Start(c.Run) }

var waitFor = consumetest.WaitFor

// publishAll publishes n messages order-<i> with data <i> and returns their
// ids.
func publishAll(t testing.TB, js jetstream.JetStream, n int) []string {
	t.Helper()
	ids := consumetest.Keys(n)
	for i, id := range ids {
		publish(t, js, "orders.created", id, fmt.Sprint(i))
	}
	return ids
}

// crash runs a Consumer on its own connection and closes that connection
// right after the first commit, before any ack; it returns how many keys
// committed.
func crash(t testing.TB, s *server.Server, e *effects, h idemnats.Handler, opts ...idemnats.Option) int {
	t.Helper()
	nc, js := natsenv.Connect(t, s.ClientURL())
	cons, err := js.Consumer(context.Background(), "ORDERS", "worker")
	if err != nil {
		t.Fatal(err)
	}
	c, err := idemnats.NewConsumer(cons, e.In, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	idemnats.SetAfterCommit(c, nc.Close) // the crash: committed, never acked
	return consumetest.Crashed(t, e.Effects, c.Run)
}

// recoverAll runs a new Consumer until dups redeliveries are acked as
// duplicates and applied others are applied.
func recoverAll(t testing.TB, cons jetstream.Consumer, e *effects, h idemnats.Handler, dups, applied int, opts ...idemnats.Option) {
	t.Helper()
	var ev events
	c, err := idemnats.NewConsumer(cons, e.In, h, append(opts, idemnats.WithObserver(ev.Observe))...)
	if err != nil {
		t.Fatal(err)
	}
	consumetest.RunUntil(t, c.Run, 20*time.Second, "redeliveries acked", func() bool {
		return ev.Count(idem.Duplicate) == dups && ev.Count(idem.Applied) == applied
	})
}

// wantAllAcked checks that the consumer has nothing pending or unacked.
func wantAllAcked(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	if info := consumerInfo(t, js); info.NumAckPending != 0 || info.NumPending != 0 {
		t.Fatalf("num_ack_pending %d, num_pending %d; want 0, 0", info.NumAckPending, info.NumPending)
	}
}

func consumerInfo(t testing.TB, js jetstream.JetStream) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := js.Consumer(context.Background(), "ORDERS", "worker")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// events collects a Consumer's settled messages.
type events = consumetest.Events[jetstream.Msg]
