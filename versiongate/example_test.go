package versiongate_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idem-go/idem/sqldialect"
	"github.com/idem-go/idem/versiongate"
	_ "modernc.org/sqlite"
)

// A product_view row kept current from price events: version 5 is stored,
// version 7 arrives and is applied, then a delayed version 6 arrives and
// changes nothing.
func Example_productView() {
	dir, _ := os.MkdirTemp("", "versiongate-")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(filepath.Join(dir, "view.db")))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE product_view (id TEXT PRIMARY KEY, version INTEGER NOT NULL, price INTEGER NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	gate, err := versiongate.New(sqldialect.SQLite, versiongate.Table{
		Name: "product_view", ID: "id", Version: "version", Columns: []string{"price"},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, m := range []struct{ version, price int64 }{{5, 1000}, {7, 1200}, {6, 1100}} {
		applied, err := gate.Upsert(ctx, db, "sku-1", m.version, m.price)
		if err != nil {
			log.Fatal(err)
		}
		var v, p int64
		_ = db.QueryRow("SELECT version, price FROM product_view WHERE id = 'sku-1'").Scan(&v, &p)
		fmt.Printf("version %d: applied=%v stored version=%d price=%d\n", m.version, applied, v, p)
	}
	// Output:
	// version 5: applied=true stored version=5 price=1000
	// version 7: applied=true stored version=7 price=1200
	// version 6: applied=false stored version=7 price=1200
}

func ExampleMemory() {
	g := versiongate.NewMemory[string, string]()
	fmt.Println(g.Apply("user-1", 2, "alice@new.example"))
	fmt.Println(g.Apply("user-1", 1, "alice@old.example")) // late
	email, version, _ := g.Get("user-1")
	fmt.Println(email, version)
	// Output:
	// true
	// false
	// alice@new.example 2
}
