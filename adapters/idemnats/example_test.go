package idemnats_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	_ "modernc.org/sqlite"
)

// wallet is what both examples share: an embedded JetStream server (in
// production, your cluster) with a WALLET stream, a Publisher and a durable
// consumer of it, and a SQLite database holding wallet 42 and the
// consumer's inbox.
type wallet struct {
	pub  *idemnats.Publisher
	cons jetstream.Consumer
	db   *sql.DB
	in   *inbox.Inbox
}

func newWallet(ctx context.Context) (*wallet, func()) {
	dir, err := os.MkdirTemp("", "idemnats-example-")
	if err != nil {
		log.Fatal(err)
	}
	ns, err := server.NewServer(&server.Options{JetStream: true, StoreDir: dir, Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	w := &wallet{}
	cleanup := func() {
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
		if w.db != nil {
			w.db.Close()
		}
		os.RemoveAll(dir)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "WALLET", Subjects: []string{"wallet.>"}}); err != nil {
		log.Fatal(err)
	}
	if w.pub, err = idemnats.NewPublisher(js); err != nil {
		log.Fatal(err)
	}
	if w.cons, err = js.CreateOrUpdateConsumer(ctx, "WALLET", jetstream.ConsumerConfig{Durable: "wallet-service", MaxDeliver: -1}); err != nil {
		log.Fatal(err)
	}
	if w.db, err = sql.Open("sqlite", sqldialect.SQLiteDSN(filepath.Join(dir, "app.db"))); err != nil {
		log.Fatal(err)
	}
	if _, err := w.db.Exec("CREATE TABLE wallets (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL); INSERT INTO wallets VALUES (42, 0)"); err != nil {
		log.Fatal(err)
	}
	if w.in, err = inbox.New(w.db, sqldialect.SQLite, "wallet-service"); err != nil {
		log.Fatal(err)
	}
	if err := w.in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	return w, cleanup
}

func (w *wallet) balance() int {
	var balance int
	if err := w.db.QueryRow("SELECT balance FROM wallets WHERE id = 42").Scan(&balance); err != nil {
		log.Fatal(err)
	}
	return balance
}

// A producer retries a publish with the same id: the stream stores it once.
// The consumer credits a wallet through the inbox and acks after the commit;
// a redelivery would be acked as a duplicate.
func Example() {
	ctx := context.Background()
	w, cleanup := newWallet(ctx)
	defer cleanup()

	for range 2 { // the second send is a producer retry
		r, err := w.pub.Publish(ctx, &nats.Msg{Subject: "wallet.credit", Data: []byte("50")}, "credit-7f3a")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("published seq=%d duplicate=%v\n", r.Sequence, r.Duplicate)
	}

	runCtx, stop := context.WithCancel(ctx)
	c, err := idemnats.NewConsumer(w.cons, w.in, func(ctx context.Context, tx *sql.Tx, m jetstream.Msg) error {
		_, err := tx.ExecContext(ctx, "UPDATE wallets SET balance = balance + CAST(? AS INTEGER) WHERE id = 42", string(m.Data()))
		return err
	}, idemnats.WithObserver(func(e idemnats.Event) {
		fmt.Printf("%s: %s\n", e.Key, e.Outcome)
		stop() // one message in this example
	}))
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(runCtx); !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	fmt.Println("balance:", w.balance())
	// Output:
	// published seq=1 duplicate=false
	// published seq=1 duplicate=true
	// credit-7f3a: applied
	// balance: 50
}

// A set handler credits a whole group with one UPDATE: the inbox records the
// group's keys with one insert and passes the handler only the messages
// whose keys were new. The per-message handler (nil here) would be the
// fallback that isolates a message the set handler cannot apply.
func ExampleWithSetHandler() {
	ctx := context.Background()
	w, cleanup := newWallet(ctx)
	defer cleanup()
	for id, amount := range map[string]string{"credit-1": "50", "credit-2": "25", "credit-3": "10"} {
		if _, err := w.pub.Publish(ctx, &nats.Msg{Subject: "wallet.credit", Data: []byte(amount)}, id); err != nil {
			log.Fatal(err)
		}
	}

	creditAll := func(ctx context.Context, tx *sql.Tx, msgs []jetstream.Msg) error {
		total := 0
		for _, m := range msgs {
			n, err := strconv.Atoi(string(m.Data()))
			if err != nil {
				return idem.Permanent(err)
			}
			total += n
		}
		_, err := tx.ExecContext(ctx, "UPDATE wallets SET balance = balance + ? WHERE id = 42", total)
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	settled := 0
	c, err := idemnats.NewConsumer(w.cons, w.in, nil, idemnats.WithSetHandler(creditAll),
		idemnats.WithObserver(func(e idemnats.Event) {
			if settled++; settled == 3 {
				stop()
			}
		}))
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(runCtx); !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	fmt.Println("balance:", w.balance())
	// Output:
	// balance: 85
}
