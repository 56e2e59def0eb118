package idemamqp_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemamqp"
	"github.com/idem-go/idem/adapters/internal/consume/consumetest"
	"github.com/idem-go/idem/adapters/internal/consume/settest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	amqp "github.com/rabbitmq/amqp091-go"
)

func TestMain(m *testing.M) { consumetest.Main(m) }

func dial(t testing.TB) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(testenv.RabbitMQURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// newEnv dials the broker, declares a topology and opens an inbox.
func newEnv(t testing.TB) (*amqp.Connection, *topology, *effects) {
	t.Helper()
	conn := dial(t)
	return conn, newTopology(t, conn, nil), newEffects(t)
}

// topology is a work queue and a dead-letter exchange bound to a dlq
// queue, all with unique names, deleted when t ends.
type topology struct {
	ch    *amqp.Channel
	queue string
	dlx   string
	dlq   string
}

func newTopology(t testing.TB, conn *amqp.Connection, queueArgs amqp.Table) *topology {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	tp := &topology{ch: ch, queue: testenv.Name("q_"), dlx: testenv.Name("dlx_"), dlq: testenv.Name("dlq_")}
	if err := ch.ExchangeDeclare(tp.dlx, "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string]amqp.Table{tp.queue: queueArgs, tp.dlq: nil} {
		if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.QueueBind(tp.dlq, "", tp.dlx, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(tp.queue, false, false, false)
		_, _ = ch.QueueDelete(tp.dlq, false, false, false)
		_ = ch.ExchangeDelete(tp.dlx, false, false)
		ch.Close()
	})
	return tp
}

// ready is how many messages wait in q (not counting unacked ones).
func (tp *topology) ready(t testing.TB, q string) int {
	t.Helper()
	info, err := tp.ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return info.Messages
}

// effects is the shared SQLite inbox with an effects table.
type effects struct{ *consumetest.Effects }

func newEffects(t testing.TB) *effects { return &effects{consumetest.NewEffects(t)} }

func messageID(d amqp.Delivery) string { return d.MessageId }

func body(d amqp.Delivery) string { return string(d.Body) }

// apply is a handler recording the delivery's effect.
func (e *effects) apply(ctx context.Context, tx *sql.Tx, d amqp.Delivery) error {
	return e.Apply(ctx, tx, d.MessageId, string(d.Body))
}

// setRecorder is a set handler writing all its deliveries' effects with one
// multi-row INSERT, and counting how often each message-id reached it.
type setRecorder struct {
	*settest.Recorder[amqp.Delivery]
	handle func(context.Context, *sql.Tx, []amqp.Delivery) error
}

func newSetRecorder() *setRecorder {
	r := settest.New(func(d amqp.Delivery) string { return d.MessageId })
	return &setRecorder{r, r.Handler("INSERT INTO effects (key, data)", func(d amqp.Delivery) []any { return []any{d.MessageId, string(d.Body)} })}
}

// applyAfter is a handler that applies a delivery's effect once before(d)
// returns nil, and fails with its error otherwise.
func (e *effects) applyAfter(before func(amqp.Delivery) error) idemamqp.Handler {
	return consumetest.ApplyAfter(e.apply, before)
}

// newPublisher opens a Publisher on conn, closed when t ends.
func newPublisher(t testing.TB, conn *amqp.Connection) *idemamqp.Publisher {
	t.Helper()
	p, err := idemamqp.NewPublisher(conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// startDLQ starts a Consumer of tp's queue that dead-letters to tp's
// exchange at the given attempt, reporting to ev.
func startDLQ(t testing.TB, conn *amqp.Connection, tp *topology, e *effects, h idemamqp.Handler, attempts int, ev *events, opts ...idemamqp.Option) *consumetest.Runner {
	t.Helper()
	c, err := idemamqp.NewConsumer(conn, tp.queue, e.In, h, append([]idemamqp.Option{idemamqp.WithMaxAttempts(attempts),
		idemamqp.WithDeadLetter(tp.dlx, ""), idemamqp.WithObserver(ev.Observe)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return start(c)
}

func start(c *idemamqp.Consumer) *consumetest.Runner { return consumetest.Start(c.Run) }

var waitFor = testenv.WaitFor

// crash runs a Consumer of tp's queue on its own connection and closes
// that connection right after the first commit, before any ack; it waits
// until the broker has requeued all queued deliveries and returns how many
// keys committed.
func crash(t testing.TB, tp *topology, e *effects, h idemamqp.Handler, queued int, opts ...idemamqp.Option) int {
	t.Helper()
	conn := dial(t)
	c, err := idemamqp.NewConsumer(conn, tp.queue, e.In, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	idemamqp.SetAfterCommit(c, func() { conn.Close() }) // the crash: committed, never acked
	committed := consumetest.Crashed(t, e.Effects, c.Run)
	waitFor(t, 5*time.Second, "requeue of the unacked deliveries", func() bool { return tp.ready(t, tp.queue) == queued })
	return committed
}

// recoverAll runs a new Consumer until dups deliveries are acked as
// duplicates and applied others are applied.
func recoverAll(t testing.TB, tp *topology, e *effects, h idemamqp.Handler, dups, applied int, opts ...idemamqp.Option) *events {
	t.Helper()
	var ev events
	c, err := idemamqp.NewConsumer(dial(t), tp.queue, e.In, h, append(opts, idemamqp.WithObserver(ev.Observe))...)
	if err != nil {
		t.Fatal(err)
	}
	consumetest.RunUntil(t, c.Run, 20*time.Second, "redeliveries acked", func() bool {
		return ev.Count(idem.Duplicate) == dups && ev.Count(idem.Applied) == applied
	})
	return &ev
}

// events collects a Consumer's settled deliveries.
type events = consumetest.Events[amqp.Delivery]
