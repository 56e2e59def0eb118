// Mirror of the first block of docs/keystore.md.
//
//docsnippets:build-only needs PostgreSQL (the block's dialect)
package main

import (
	"context"
	"database/sql"
	"log"
	"os"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/sqldialect"
)

func chargeOnce(ctx context.Context, db *sql.DB, key string, fingerprint []byte, amount int64) error {
	store, err := sqlstore.New(db, sqldialect.Postgres) // or memstore.New(), sqlitestore.Open(path), redisstore.New(rdb)
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil { // or apply store.SchemaSQL() with your migration tool
		return err
	}
	res, replayed, err := keystore.Do(ctx, store, key, fingerprint,
		func(ctx context.Context) ([]byte, error) {
			return stripe.Charge(ctx, amount, key) // Idempotency-Key: key
		},
		keystore.WithLease(30*time.Second), keystore.WithTTL(72*time.Hour))
	switch {
	case err != nil:
		return err // not done (or not recorded): do not acknowledge; the message comes back
	case replayed:
		log.Printf("duplicate: %s is the first execution's result; acknowledge", res)
	default:
		log.Printf("charged: %s; acknowledge", res)
	}
	return nil
}

// stripe stands for a payment provider's client.
var stripe fakeStripe

type fakeStripe struct{}

func (fakeStripe) Charge(ctx context.Context, amount int64, key string) ([]byte, error) {
	return []byte("ch_" + key), nil
}

func main() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := chargeOnce(context.Background(), db, "payments.capture:order-42", nil, 5000); err != nil {
		log.Fatal(err)
	}
}
