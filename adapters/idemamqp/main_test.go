package idemamqp_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"

	"github.com/idem-go/idem/adapters/idemamqp"
	"github.com/idem-go/idem/internal/consume/consumetest"
	"github.com/idem-go/idem/internal/testenv"
	amqp "github.com/rabbitmq/amqp091-go"
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

func dial(t testing.TB) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(testenv.RabbitMQURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
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

func start(c *idemamqp.Consumer) *consumetest.Runner { return consumetest.Start(c.Run) }

var waitFor = consumetest.WaitFor

// events collects a Consumer's settled deliveries.
type events = consumetest.Events[amqp.Delivery]
