package idemnats_test

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/idem-go/idem"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/sqldialect"
	"github.com/nats-io/nats-server/v2/server"
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

// runServer starts an embedded JetStream server storing in dir, on port (-1
// for a free one), and shuts it down when t ends.
func runServer(t testing.TB, dir string, port int) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{JetStream: true, StoreDir: dir, Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

func serverPort(s *server.Server) int { return s.Addr().(*net.TCPAddr).Port }

func connect(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
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

// apply is a handler recording the message's effect.
func (e *effects) apply(ctx context.Context, tx *sql.Tx, m jetstream.Msg) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO effects (key, data) VALUES (?, ?)", m.Headers().Get(jetstream.MsgIDHeader), string(m.Data()))
	return err
}

// counts returns how many times each key's effect was applied.
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

// runner runs a Consumer in a goroutine the test owns.
type runner struct {
	cancel context.CancelFunc
	done   chan error
}

func start(c *idemnats.Consumer) *runner {
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

// waitFor polls cond until it holds or d passes.
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
type events struct {
	mu  sync.Mutex
	all []idemnats.Event
}

func (e *events) observe(ev idemnats.Event) {
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
