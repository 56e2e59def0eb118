package idemwatermill_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	_ "modernc.org/sqlite"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/adapters/idemwatermill"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/keystore/memstore"
	"github.com/idem-go/idem/sqldialect"
)

// A handler that fails on its first delivery, under Watermill's Router with
// the gochannel pubsub. The router nacks the failure, gochannel redelivers,
// and idem's middleware runs the handler again (Watermill's Deduplicator would
// drop the redelivery). A later duplicate of the same message is acknowledged
// without running the handler.
func ExampleMiddleware() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	dedup, err := idemwatermill.NewMiddleware(store)
	if err != nil {
		log.Fatal(err)
	}

	logger := watermill.NopLogger{}
	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	defer pubsub.Close()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, logger)
	if err != nil {
		log.Fatal(err)
	}
	attempts, charged := 0, 0
	router.AddConsumerHandler("charge", "orders", pubsub, func(msg *message.Message) error {
		attempts++
		if attempts == 1 {
			fmt.Println("attempt 1: payment provider timed out")
			return errors.New("timeout")
		}
		charged++
		fmt.Printf("attempt %d: charged order %s\n", attempts, msg.Payload)
		return nil
	}).AddMiddleware(dedup.Middleware)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	<-router.Running()

	id := watermill.NewUUID()
	for range 2 { // the second publish is a duplicate: same UUID
		if err := pubsub.Publish("orders", message.NewMessage(id, []byte("7"))); err != nil {
			log.Fatal(err)
		}
	}
	if err := router.Close(); err != nil {
		log.Fatal(err)
	}
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	fmt.Println("charged:", charged)
	// Output:
	// attempt 1: payment provider timed out
	// attempt 2: charged order 7
	// charged: 1
}

// tempDB opens a fresh SQLite file (in production, your database) and
// returns it with the function that closes and removes it.
func tempDB() (*sql.DB, func()) {
	f, err := os.CreateTemp("", "idemwatermill-example-*.db")
	if err != nil {
		log.Fatal(err)
	}
	f.Close()
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(f.Name()))
	if err != nil {
		log.Fatal(err)
	}
	return db, func() {
		db.Close()
		for _, suffix := range []string{"", "-wal", "-shm"} {
			os.Remove(f.Name() + suffix)
		}
	}
}

// The inbox variant: the handler writes through the transaction it gets from
// Tx(msg.Context()), so the message's key and the wallet update commit
// together. A redelivered message changes nothing.
func ExampleInboxMiddleware() {
	ctx := context.Background()
	db, cleanup := tempDB()
	defer cleanup()
	if _, err := db.Exec(`CREATE TABLE wallets (user_id INTEGER PRIMARY KEY, balance INTEGER NOT NULL); INSERT INTO wallets VALUES (42, 0)`); err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(db, sqldialect.SQLite, "wallet-credits")
	if err != nil {
		log.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	dedup, err := idemwatermill.NewInboxMiddleware(in, idemwatermill.WithKeyMetadata("event_id"))
	if err != nil {
		log.Fatal(err)
	}
	handle := dedup.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		tx, ok := idemwatermill.Tx(msg.Context())
		if !ok {
			return nil, errors.New("no inbox transaction")
		}
		_, err := tx.ExecContext(msg.Context(), `UPDATE wallets SET balance = balance + CAST(? AS INTEGER) WHERE user_id = 42`, string(msg.Payload))
		return nil, err
	})
	for range 2 { // a delivery and its redelivery (a new UUID, the same event id)
		msg := message.NewMessage(watermill.NewUUID(), []byte("50"))
		msg.Metadata.Set("event_id", "evt-1")
		if _, err := handle(msg); err != nil {
			log.Fatal(err)
		}
	}
	var balance int
	if err := db.QueryRow(`SELECT balance FROM wallets WHERE user_id = 42`).Scan(&balance); err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance:", balance)
	// Output:
	// balance: 50
}

// The observer sees what became of each message, in the outcomes and
// reasons every idem adapter shares. A message without a key, or one the
// handler marks idem.Permanent, fails with an error that is itself marked
// idem.Permanent, for Watermill's PoisonQueueWithFilter(idem.IsPermanent).
func ExampleWithObserver() {
	observe := func(e idemwatermill.Event) {
		fmt.Println(strings.TrimSpace(fmt.Sprintf("order %q: %s %s", e.Key, e.Outcome, e.Reason)))
	}
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	dedup, err := idemwatermill.NewMiddleware(store, idemwatermill.WithKeyMetadata("order_id"), idemwatermill.WithObserver(observe))
	if err != nil {
		log.Fatal(err)
	}
	h := dedup.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if string(msg.Payload) == "garbage" {
			return nil, idem.Permanent(errors.New("cannot parse"))
		}
		return nil, nil
	})
	for _, m := range []struct{ order, payload string }{{"7", "ok"}, {"7", "ok"}, {"", "ok"}, {"8", "garbage"}} {
		msg := message.NewMessage("uuid-"+m.order, []byte(m.payload))
		if m.order != "" {
			msg.Metadata.Set("order_id", m.order)
		}
		if _, err := h(msg); err != nil {
			fmt.Println("  poison queue:", idem.IsPermanent(err))
		}
	}
	// Output:
	// order "7": applied
	// order "7": duplicate
	// order "": dead-lettered missing-key
	//   poison queue: true
	// order "8": dead-lettered permanent
	//   poison queue: true
}
