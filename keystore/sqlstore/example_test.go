package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/sqldialect"
	_ "modernc.org/sqlite"
)

// A key store on a table of the application's own database (SQLite here;
// sqldialect.Postgres with the pgx driver is the same call): a payment
// retried with the same key runs once, and the retry gets the first
// result.
func ExampleNew() {
	// An in-memory database on one connection, for the example; a file
	// opened with sqldialect.SQLiteDSN in an application.
	db, err := sql.Open("sqlite", "file:sqlstore-example?mode=memory")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()

	store, err := sqlstore.New(db, sqldialect.SQLite, sqlstore.WithTable("payment_keys"), sqlstore.WithScope("payments"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil { // or apply store.SchemaSQL() with a migration tool
		log.Fatal(err)
	}
	charges := 0
	for range 2 {
		res, replayed, err := keystore.Do(ctx, store, "order-42", nil, func(context.Context) ([]byte, error) {
			charges++
			return []byte("charge ch_1"), nil
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s replayed=%v\n", res, replayed)
	}
	fmt.Println("charges:", charges)
	// Output:
	// charge ch_1 replayed=false
	// charge ch_1 replayed=true
	// charges: 1
}

// Moving a table made by an earlier release (primary key (scope, idem_key))
// to the digest layout: Migrate keeps the old layout working, MigrateLayout
// copies the live keys in one transaction, and a completed key stays
// completed across the switch.
func ExampleStore_MigrateLayout() {
	db, err := sql.Open("sqlite", "file:sqlstore-migrate-example?mode=memory")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	// The table as the earlier release created it.
	if _, err := db.Exec(`CREATE TABLE idem_keys (scope TEXT NOT NULL, idem_key BLOB NOT NULL, state INTEGER NOT NULL,
	token INTEGER NOT NULL, takeovers INTEGER NOT NULL DEFAULT 0, fingerprint BLOB, result BLOB,
	expires_at INTEGER NOT NULL, PRIMARY KEY (scope, idem_key))`); err != nil {
		log.Fatal(err)
	}
	store, err := sqlstore.New(db, sqldialect.SQLite)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	layout, _ := store.Layout(ctx)
	fmt.Println("before:", layout)
	if _, _, err := keystore.Do(ctx, store, "order-42", nil, func(context.Context) ([]byte, error) { return []byte("ok"), nil }); err != nil {
		log.Fatal(err)
	}
	if err := store.MigrateLayout(ctx); err != nil {
		log.Fatal(err)
	}
	layout, _ = store.Layout(ctx)
	c, err := store.Reserve(ctx, "order-42", nil, keystore.DefaultLease)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after:", layout, c.State, string(c.Result))
	// Output:
	// before: rows
	// after: digest done ok
}
