package pglisten_test

import (
	"context"
	"database/sql"
	"log"
	"os"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/keystore/sqlstore/pglisten"
	"github.com/idem-go/idem/sqldialect"
)

// A PostgreSQL key store whose waiters wake when the holder completes.
func ExampleNew() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	l, err := pglisten.New(db)
	if err != nil {
		log.Fatal(err)
	}
	s, err := sqlstore.New(db, sqldialect.Postgres, sqlstore.WithListener(l))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	wait := keystore.Wait{Min: 10 * time.Millisecond, Max: 250 * time.Millisecond, Timeout: 30 * time.Second}
	c, err := keystore.Await(ctx, s, "invoice-7", nil, time.Minute, wait)
	if err != nil {
		log.Fatal(err)
	}
	log.Println(c.State)
}
