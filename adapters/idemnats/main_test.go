package idemnats_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/internal/consume/consumetest"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := testenv.Main(m)
	if err := goleak.Find(); code == 0 && err != nil {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
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

func start(c *idemnats.Consumer) *consumetest.Runner { return consumetest.Start(c.Run) }

var waitFor = consumetest.WaitFor

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
