// Mirror of the block in docs/adapters-kafka.md, "Outbox publisher".
//
//docsnippets:build-only needs a Kafka broker
package main

import (
	"context"
	"database/sql"
	"log"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"
	_ "modernc.org/sqlite"

	"github.com/idem-go/idem/adapters/idemkafka"
	"github.com/idem-go/idem/outbox"
	"github.com/idem-go/idem/sqldialect"
)

func relay(ctx context.Context, cl *kgo.Client, db *sql.DB, ob *outbox.Outbox) error {
	p, err := idemkafka.NewProducer(cl) // refuses a client with idempotent writes off
	if err != nil {
		return err
	}
	relay, err := outbox.NewRelay(db, ob, p.OutboxPublisher())
	if err != nil {
		return err
	}
	return relay.Run(ctx) // until ctx ends: run it on a goroutine of its own
}

func main() {
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(os.Getenv("KAFKA_ADDR")))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN("app.db"))
	if err != nil {
		log.Fatal(err)
	}
	ob, err := outbox.New(sqldialect.SQLite)
	if err != nil {
		log.Fatal(err)
	}
	if err := relay(ctx, cl, db, ob); err != nil {
		log.Fatal(err)
	}
}
