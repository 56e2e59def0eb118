package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlitestore"
	_ "modernc.org/sqlite" // the driver sqlitestore opens
)

func main() {
	ctx := context.Background()
	store, err := sqlitestore.Open("keys.db") // or memstore.New(), sqlstore.New(db, sqldialect.Postgres), redisstore.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil { // or apply store.SchemaSQL() with your migration tool
		log.Fatal(err)
	}
	key, err := idem.DeriveKey("payments.capture", "order-42")
	if err != nil {
		log.Fatal(err)
	}
	for range 2 { // an attempt and its retry
		receipt, replayed, err := keystore.Do(ctx, store, key, nil, func(ctx context.Context) ([]byte, error) {
			return charge(ctx, key) // pass the key downstream too
		}, keystore.WithLease(time.Minute), keystore.WithTTL(72*time.Hour))
		if err != nil {
			log.Fatal(err) // not done (or not recorded): retry later with the same key
		}
		// charged once; replayed == true means an earlier attempt did it and receipt is its result
		fmt.Printf("receipt=%s replayed=%v\n", receipt, replayed)
	}
}

// charge stands for the payment provider's call, which takes the key as
// its own idempotency key.
func charge(ctx context.Context, key string) ([]byte, error) {
	return []byte("ch_" + key[:12]), nil
}
