package idemamqp_test

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/idem-go/idem"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/adapters/idemamqp"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/sqldialect"
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

// effects is a SQLite inbox with an effects table the handlers write to.
type effects struct {
	db *sql.DB
	in *inbox.Inbox
}

func newEffects(t testing.TB) *effects {
	t.Helper()
	db := testenv.SQLite(t)
	in, err := inbox.New(db, sqldialect.SQLite, "orders-worker")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := in.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE effects (key TEXT NOT NULL, data TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return &effects{db: db, in: in}
}

func (e *effects) apply(ctx context.Context, tx *sql.Tx, d amqp.Delivery) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO effects (key, data) VALUES (?, ?)", d.MessageId, string(d.Body))
	return err
}

func (e *effects) counts(t testing.TB) map[string]int {
	t.Helper()
	rows, err := e.db.Query("SELECT key, count(*) FROM effects GROUP BY key")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	return out
}

type runner struct {
	cancel context.CancelFunc
	done   chan error
}

func start(c *idemamqp.Consumer) *runner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	return r
}

func (r *runner) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after cancel")
		return nil
	}
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type events struct {
	mu  sync.Mutex
	all []idemamqp.Event
}

func (e *events) observe(ev idemamqp.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) count(o idem.Outcome) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.all {
		if ev.Outcome == o {
			n++
		}
	}
	return n
}

func (e *events) each(f func(idemamqp.Event)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.all {
		f(ev)
	}
}
