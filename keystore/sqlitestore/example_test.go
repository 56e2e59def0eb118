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
func ExampleCheckpointer() {
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

	cdb, err := sql.Open("sqlite", sqldialect.SQLiteDSN(path))
	if err != nil {
		log.Fatal(err)
	}
	defer cdb.Close()
	cdb.SetMaxOpenConns(1)
	cp, err := sqlitestore.NewCheckpointer(cdb, 100*time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cp.Run(runCtx) }()

	c, err := store.Reserve(ctx, "order-42", nil, time.Minute)
	if err != nil || c.State != keystore.Acquired {
		log.Fatal(c.State, err)
	}
	if err := store.Complete(ctx, c, []byte("created"), time.Hour); err != nil {
		log.Fatal(err)
	}
	stop()
	<-done
	wal, copied, err := cp.Checkpoint(ctx) // a last one on shutdown
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("WAL copied back:", wal == copied)
	again, _ := store.Reserve(ctx, "order-42", nil, time.Minute)
	fmt.Printf("%s %s\n", again.State, again.Result)
	// Output:
	// WAL copied back: true
	// done created
}
