package consumetest

import (
	"context"
	"errors"
	"testing"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/outbox"
	"github.com/idem-go/idem/sqldialect"
)

// Relay writes msgs to a fresh SQLite outbox and relays them through pub in
// batches of batch, the relay dying (after publishing, before marking) in
// every round for which dies(round) is true, counting from 1, until the
// outbox is empty. It returns how many messages were published in all.
func Relay(tb testing.TB, msgs []outbox.Message, batch int, pub outbox.Publisher, dies func(round int) bool) int {
	tb.Helper()
	ctx := context.Background()
	db := testenv.SQLite(tb)
	ob, err := outbox.New(sqldialect.SQLite)
	if err != nil {
		tb.Fatal(err)
	}
	if err := ob.Migrate(ctx, db); err != nil {
		tb.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		tb.Fatal(err)
	}
	for _, m := range msgs {
		if _, err := ob.Add(ctx, tx, m); err != nil {
			tb.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		tb.Fatal(err)
	}
	rounds, published := 0, 0
	relay, err := outbox.NewRelay(db, ob, outbox.PublisherFunc(func(ctx context.Context, msgs []outbox.Message) error {
		if err := pub.Publish(ctx, msgs); err != nil {
			return err
		}
		published += len(msgs)
		rounds++
		if dies(rounds) {
			return errors.New("relay died before marking")
		}
		return nil
	}), outbox.WithBatch(batch))
	if err != nil {
		tb.Fatal(err)
	}
	for {
		n, err := relay.RunOnce(ctx)
		if err == nil && n == 0 {
			return published
		}
	}
}
