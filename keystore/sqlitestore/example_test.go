package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlitestore"
	"github.com/idem-go/idem/sqldialect"
	_ "modernc.org/sqlite"
)

// A store opened as idem serve opens it: one connection for the store, and
// a checkpointer on a second connection to the same file.
func ExampleStartCheckpointer() {
	dir, err := os.MkdirTemp("", "sqlitestore-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "keys.db")
	ctx := context.Background()

	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(path)+sqlitestore.DSNSuffix)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	store, err := sqlitestore.New(db)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	stop, err := sqlitestore.StartCheckpointer(path, 100*time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}

	c, err := store.Reserve(ctx, "order-42", nil, time.Minute)
	if err != nil || c.State != keystore.Acquired {
		log.Fatal(c.State, err)
	}
	if err := store.Complete(ctx, c, []byte("created"), time.Hour); err != nil {
		log.Fatal(err)
	}
	if err := stop(); err != nil { // a last checkpoint, then close
		log.Fatal(err)
	}
	var wal, copied int64 // the WAL's pages, and how many are in the database file
	_ = db.QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(new(int), &wal, &copied)
	fmt.Println("WAL copied back:", wal == copied)
	again, _ := store.Reserve(ctx, "order-42", nil, time.Minute)
	fmt.Printf("%s %s\n", again.State, again.Result)
	// Output:
	// WAL copied back: true
	// done created
}
