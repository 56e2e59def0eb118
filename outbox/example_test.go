package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idem-go/idem/outbox"
	"github.com/idem-go/idem/sqldialect"
	_ "modernc.org/sqlite"
)

// An order and its OrderCreated event commit together; the relay publishes
// the event afterwards. A second round finds nothing left to send.
func Example() {
	dir, _ := os.MkdirTemp("", "outbox-")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(filepath.Join(dir, "shop.db")))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	ob, _ := outbox.New(sqldialect.SQLite)
	if err := ob.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	_, _ = db.Exec("CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER)")

	tx, _ := db.BeginTx(ctx, nil)
	_, _ = tx.Exec("INSERT INTO orders VALUES ('order-7', 5000)")
	if _, err := ob.Add(ctx, tx, outbox.Message{ID: "order-created:order-7", Topic: "orders", OrderingKey: "order-7", Payload: []byte(`{"total":5000}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	relay, _ := outbox.NewRelay(db, ob, outbox.PublisherFunc(func(ctx context.Context, msgs []outbox.Message) error {
		for _, m := range msgs {
			fmt.Printf("publish %s to %s: %s\n", m.ID, m.Topic, m.Payload) // a broker client here
		}
		return nil
	}))
	for range 2 {
		n, err := relay.RunOnce(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("published", n)
	}
	// Output:
	// publish order-created:order-7 to orders: {"total":5000}
	// published 1
	// published 0
}
