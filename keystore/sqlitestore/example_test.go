package sqlitestore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlitestore"
	"github.com/idem-go/idem/keystore/sqlstore"
	_ "modernc.org/sqlite" // the "sqlite" driver
)

// A key store on a SQLite file, opened as idem serve opens it: one
// connection for the store, and a checkpointer on a second connection to
// the same file, until Close.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "sqlitestore-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	store, err := sqlitestore.Open(filepath.Join(dir, "keys.db"), sqlstore.WithScope("payments"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	c, err := store.Reserve(ctx, "order-42", nil, time.Minute)
	if err != nil || c.State != keystore.Acquired {
		log.Fatal(c.State, err)
	}
	if err := store.Complete(ctx, c, []byte("created"), time.Hour); err != nil {
		log.Fatal(err)
	}
	again, err := store.Reserve(ctx, "order-42", nil, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s %s\n", again.State, again.Result)
	// Output:
	// done created
}
