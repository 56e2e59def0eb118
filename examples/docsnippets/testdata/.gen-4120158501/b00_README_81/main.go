package main

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
	_ "modernc.org/sqlite" // the "sqlite" driver; PostgreSQL: pgx's stdlib ("pgx"), MySQL: go-sql-driver ("mysql")
)

func main() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN("app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	in, err := inbox.New(db, sqldialect.SQLite, "wallet-consumer", // the dialect must match the database
		inbox.WithRedeliveryHorizon(7*24*time.Hour), // topic retention: keep keys at least this long
		inbox.WithRetention(8*24*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil { // or apply in.SchemaSQL() with your migration tool
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS wallets (user_id INTEGER PRIMARY KEY, balance INTEGER NOT NULL);
		INSERT OR IGNORE INTO wallets VALUES (42, 0)`); err != nil {
		log.Fatal(err)
	}

	for _, msgID := range []string{"evt-1", "evt-1"} { // a delivery and its redelivery
		applied, err := in.Process(ctx, msgID, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE wallets SET balance = balance + ? WHERE user_id = ?", 50, 42)
			return err
		})
		if err != nil {
			log.Fatal(err) // nothing recorded (or commit outcome unknown): do not ack, let the broker redeliver
		}
		fmt.Printf("%s: applied=%v\n", msgID, applied) // applied == false means "already done": ack it too
	}
	var balance int
	if err := db.QueryRowContext(ctx, "SELECT balance FROM wallets WHERE user_id = 42").Scan(&balance); err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance:", balance) // 50: the redelivery was not applied again
}
