// Mirror of the block in docs/adapters-kafka.md, "Set handlers".
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
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
)

func consume(ctx context.Context, in *inbox.Inbox, kopts []kgo.Opt, creditOne idemkafka.Handler, creditAll idemkafka.SetHandler) error {
	type SetHandler func(ctx context.Context, tx *sql.Tx, recs []*kgo.Record) error

	c, err := idemkafka.NewConsumer(in, creditOne, kopts,
		idemkafka.WithSetHandler(creditAll), // recs: only the records whose keys were new
		idemkafka.WithDeadLetter("payments.dlq"))
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Run(ctx) // until ctx ends or a batch can neither be applied nor dead-lettered
}

func main() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN("app.db"))
	if err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(db, sqldialect.SQLite, "payments")
	if err == nil {
		err = in.Migrate(ctx)
	}
	if err != nil {
		log.Fatal(err)
	}
	kopts := []kgo.Opt{kgo.SeedBrokers(os.Getenv("KAFKA_ADDR")), kgo.ConsumerGroup("payments"), kgo.ConsumeTopics("payments")}
	creditOne := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error { return nil }
	creditAll := func(ctx context.Context, tx *sql.Tx, recs []*kgo.Record) error { return nil }
	if err := consume(ctx, in, kopts, creditOne, creditAll); err != nil {
		log.Fatal(err)
	}
}
