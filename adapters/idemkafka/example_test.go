package idemkafka_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	_ "modernc.org/sqlite"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/memstore"
	"github.com/idem-go/idem/outbox"
	"github.com/idem-go/idem/sqldialect"
	"github.com/idem-go/idem/window/diskwindow"
)

// A payment produced twice with the same idem-id (the producer retried after
// a timeout) credits the wallet once; both records are acknowledged. The
// broker is kfake, in-process; see walletExample for the scaffolding.
func ExampleConsumer() {
	ctx := context.Background()
	w := newWalletExample()
	defer w.close()

	// Produce: the same payment twice, with one stable id.
	w.pay("payment-7", "50")
	w.pay("payment-7", "50")

	// Consume through an inbox named after the group.
	in, err := inbox.New(w.db, sqldialect.SQLite, "billing")
	if err != nil {
		log.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	c, err := idemkafka.NewConsumer(in,
		func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
			_, err := tx.ExecContext(ctx, `UPDATE wallets SET balance = balance + CAST(? AS INTEGER) WHERE user_id = 42`, string(r.Value))
			return err
		},
		w.kopts("billing"),
		idemkafka.WithObserver(printOutcomes(2, stop)),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(runCtx); !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	c.Close() // commits the marked offsets
	fmt.Println("balance:", w.balance())
	// Output:
	// offset 0: applied
	// offset 1: duplicate
	// balance: 50
}

// The producing side of the outbox: the business transaction adds the
// message, and a relay publishes committed messages to Kafka, keyed by the
// aggregate, with idem-id = the message id. A consumer built with
// NewConsumer (inbox mode) absorbs the copies a relay republishes after a
// crash.
func ExampleProducer_OutboxPublisher() {
	ctx := context.Background()
	var db *sql.DB // the service's database (PostgreSQL or SQLite)
	ob, err := outbox.New(sqldialect.Postgres)
	if err != nil {
		log.Fatal(err)
	}

	// In the business transaction:
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE orders SET status = 'paid' WHERE id = 7`); err != nil {
		log.Fatal(err)
	}
	if _, err := ob.Add(ctx, tx, outbox.Message{Topic: "orders", OrderingKey: "order-7", Payload: []byte(`{"status":"paid"}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	// In the relay process:
	cl, err := kgo.NewClient(kgo.SeedBrokers("localhost:9092")) // idempotent, acks=all: franz-go's defaults
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	p, err := idemkafka.NewProducer(cl)
	if err != nil {
		log.Fatal(err)
	}
	relay, err := outbox.NewRelay(db, ob, p.OutboxPublisher())
	if err != nil {
		log.Fatal(err)
	}
	_ = relay.Run(ctx) // until ctx ends
}

// A set handler applies the new records of each polled batch with one
// statement: here one UPDATE adds up the batch's payments. Three records are
// produced, the second a producer retry of the first (same idem-id); the
// inbox records the keys with one insert and passes the set handler only the
// records whose keys were new. The per-record handler given to NewConsumer
// is the fallback that isolates a record the set handler cannot apply.
func ExampleWithSetHandler() {
	w := newWalletExample()
	defer w.close()
	w.pay("payment-7", "50")
	w.pay("payment-7", "50")
	w.pay("payment-8", "25")

	in := w.inbox("billing") // as in ExampleConsumer
	// The whole batch: aggregate per wallet first, then one UPDATE.
	creditAll := func(ctx context.Context, tx *sql.Tx, recs []*kgo.Record) error {
		total := 0
		for _, r := range recs {
			n, err := strconv.Atoi(string(r.Value))
			if err != nil {
				return idem.Permanent(err)
			}
			total += n
		}
		_, err := tx.ExecContext(ctx, `UPDATE wallets SET balance = balance + ? WHERE user_id = 42`, total)
		return err
	}
	observe, run := until(3)
	// w.credit, one record at a time, is the fallback when creditAll fails.
	c, err := idemkafka.NewConsumer(in, w.credit, w.kopts("billing"), idemkafka.WithSetHandler(creditAll), observe)
	if err != nil {
		log.Fatal(err)
	}
	run(c)
	fmt.Println("balance:", w.balance())
	// Output:
	// offset 0: applied
	// offset 1: duplicate
	// offset 2: applied
	// balance: 75
}

// An OffsetConsumer keeps each partition's next offset in the database, in
// the transaction of the effects: no key per record. It absorbs
// redeliveries (a restarted member seeks to the stored offset), not a
// message produced twice, which has two offsets: here both copies of the
// payment are credited.
func ExampleOffsetConsumer() {
	w := newWalletExample()
	defer w.close()
	w.pay("payment-7", "50")
	w.pay("payment-7", "50") // a producer retry: another offset

	observe, run := until(2)
	c, err := idemkafka.NewOffsetConsumer(w.db, sqldialect.SQLite, w.credit, w.kopts("billing"), observe)
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Migrate(context.Background()); err != nil { // or apply c.SchemaSQL()
		log.Fatal(err)
	}
	run(c)
	var next int64
	if err := w.db.QueryRow(`SELECT next_offset FROM idem_kafka_offsets WHERE group_id = 'billing'`).Scan(&next); err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance:", w.balance(), "next offset:", next)
	// Output:
	// offset 0: applied
	// offset 1: applied
	// balance: 100 next offset: 2
}

// A KeystoreConsumer is for effects outside any database: each record runs
// through keystore.Do, so the receipt for a payment produced twice is sent
// once; the copy is reported as a duplicate.
func ExampleKeystoreConsumer() {
	w := newWalletExample()
	defer w.close()
	w.pay("payment-7", "50")
	w.pay("payment-7", "50")

	store, err := memstore.New() // or a shared store: sqlstore, redisstore, …
	if err != nil {
		log.Fatal(err)
	}
	send := func(_ context.Context, r *kgo.Record) error {
		fmt.Println("receipt sent for a payment of", string(r.Value))
		return nil
	}
	observe, run := until(2)
	c, err := idemkafka.NewKeystoreConsumer(store, send, w.kopts("receipts"), observe,
		idemkafka.WithKeystoreOptions(keystore.WithLease(time.Minute)))
	if err != nil {
		log.Fatal(err)
	}
	run(c)
	// Output:
	// receipt sent for a payment of 50
	// offset 0: applied
	// offset 1: duplicate
}

// A WindowConsumer skips the duplicates a broker redelivers without an
// inbox or a key store: a day of keys on one disk (diskwindow), each
// recorded only after its handler succeeded. For effects idempotent
// downstream: an index write, an object upload keyed by the id.
func ExampleWindowConsumer() {
	w := newWalletExample()
	defer w.close()
	w.pay("payment-8", "70")
	w.pay("payment-8", "70")

	dir, err := os.MkdirTemp("", "dedup")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	set, err := diskwindow.Open(dir, 24*time.Hour) // one set a partition, or a process
	if err != nil {
		log.Fatal(err)
	}
	defer set.Close()
	index := func(_ context.Context, r *kgo.Record) error {
		fmt.Println("indexed a payment of", string(r.Value))
		return nil
	}
	observe, run := until(2)
	c, err := idemkafka.NewWindowConsumer(set, index, w.kopts("search-index"), observe)
	if err != nil {
		log.Fatal(err)
	}
	run(c)
	// Output:
	// indexed a payment of 70
	// offset 0: applied
	// offset 1: duplicate
}

// walletExample is the scaffolding of the examples: an in-process broker
// (kfake) with the topics "payments" and "ledger-entries", a producer that
// stamps idem-ids, and an in-memory SQLite database holding wallet 42 at
// balance 0.
type walletExample struct {
	cluster  *kfake.Cluster
	producer *idemkafka.Producer
	db       *sql.DB
	close    func()
}

func newWalletExample() *walletExample {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "payments", "ledger-entries"))
	if err != nil {
		log.Fatal(err)
	}
	pcl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		log.Fatal(err)
	}
	producer, err := idemkafka.NewProducer(pcl)
	if err != nil {
		log.Fatal(err)
	}
	// One connection to an in-memory database: it lives as long as db.
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(":memory:"))
	if err == nil {
		db.SetMaxOpenConns(1)
		_, err = db.Exec(`CREATE TABLE wallets (user_id INTEGER PRIMARY KEY, balance INTEGER NOT NULL); INSERT INTO wallets VALUES (42, 0)`)
	}
	if err != nil {
		log.Fatal(err)
	}
	return &walletExample{cluster: cluster, producer: producer, db: db, close: func() {
		db.Close()
		pcl.Close()
		cluster.Close()
	}}
}

// pay produces a payment of amount to "payments" with the given idem-id.
func (w *walletExample) pay(id, amount string) {
	if err := w.producer.Produce(context.Background(), id, &kgo.Record{Topic: "payments", Value: []byte(amount)}); err != nil {
		log.Fatal(err)
	}
}

// kopts are the client options of a consumer of "payments" in group.
func (w *walletExample) kopts(group string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(w.cluster.ListenAddrs()...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics("payments"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
}

// inbox returns a migrated inbox of the wallet database for consumer.
func (w *walletExample) inbox(consumer string) *inbox.Inbox {
	in, err := inbox.New(w.db, sqldialect.SQLite, consumer)
	if err == nil {
		err = in.Migrate(context.Background())
	}
	if err != nil {
		log.Fatal(err)
	}
	return in
}

// credit adds a payment to wallet 42 inside tx.
func (w *walletExample) credit(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
	_, err := tx.ExecContext(ctx, `UPDATE wallets SET balance = balance + CAST(? AS INTEGER) WHERE user_id = 42`, string(r.Value))
	return err
}

func (w *walletExample) balance() int {
	var balance int
	if err := w.db.QueryRow(`SELECT balance FROM wallets WHERE user_id = 42`).Scan(&balance); err != nil {
		log.Fatal(err)
	}
	return balance
}

// until returns an observer option that prints each record's outcome, and a
// run that runs a consumer until n records were reported, then closes it.
func until(n int) (idemkafka.Option, func(runner)) {
	ctx, stop := context.WithCancel(context.Background())
	run := func(c runner) {
		if err := c.Run(ctx); !errors.Is(err, context.Canceled) {
			log.Fatal(err)
		}
		c.Close()
	}
	return idemkafka.WithObserver(printOutcomes(n, stop)), run
}

// printOutcomes prints each record's outcome and calls stop after n.
func printOutcomes(n int, stop func()) func(idemkafka.Event) {
	seen := 0
	return func(e idemkafka.Event) {
		fmt.Printf("offset %d: %v\n", e.Msg.Offset, e.Outcome)
		if seen++; seen == n {
			stop()
		}
	}
}
