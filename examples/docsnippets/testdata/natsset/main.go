// Mirror of the block in docs/adapters-nats-amqp.md, set handlers.
//
//docsnippets:build-only needs a NATS JetStream server
package main

import (
	"context"
	"database/sql"
	"log"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	_ "modernc.org/sqlite"

	"github.com/idem-go/idem/adapters/idemnats"
	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
)

func consume(ctx context.Context, cons jetstream.Consumer, in *inbox.Inbox, applyOne idemnats.Handler,
	applyAll func(ctx context.Context, tx *sql.Tx, msgs []jetstream.Msg) error) error {
	c, err := idemnats.NewConsumer(cons, in, applyOne, // applyOne: the fallback; may be nil
		idemnats.WithSetHandler(func(ctx context.Context, tx *sql.Tx, msgs []jetstream.Msg) error {
			return applyAll(ctx, tx, msgs) // one multi-row INSERT / one UPDATE
		}))
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

func main() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	cons, err := js.Consumer(ctx, "ORDERS", "inventory")
	if err != nil {
		log.Fatal(err)
	}
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN("app.db"))
	if err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(db, sqldialect.SQLite, "inventory")
	if err == nil {
		err = in.Migrate(ctx)
	}
	if err != nil {
		log.Fatal(err)
	}
	applyAll := func(ctx context.Context, tx *sql.Tx, msgs []jetstream.Msg) error { return nil }
	if err := consume(ctx, cons, in, nil, applyAll); err != nil {
		log.Fatal(err)
	}
}
