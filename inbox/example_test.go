package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/sqldialect"
	_ "modernc.org/sqlite"
)

// openExampleDB opens a fresh SQLite file with a one-row accounts table.
func openExampleDB() (*sql.DB, func()) {
	dir, err := os.MkdirTemp("", "idem-example-")
	if err != nil {
		log.Fatal(err)
	}
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(filepath.Join(dir, "example.db")))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL); INSERT INTO accounts VALUES (42, 0)"); err != nil {
		log.Fatal(err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

// An Account: five deliveries, two of them duplicates. The event id
// and the balance change commit in one transaction, so a redelivered event
// changes nothing.
func Example_account() {
	db, cleanup := openExampleDB()
	defer cleanup()
	ctx := context.Background()

	in, err := inbox.New(db, sqldialect.SQLite, "account-service")
	if err != nil {
		log.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	deliveries := []struct {
		eventID string
		amount  int64
	}{{"evt-1", 50}, {"evt-2", 30}, {"evt-1", 50}, {"evt-2", 30}, {"evt-3", 5}}
	for _, d := range deliveries {
		applied, err := in.Process(ctx, d.eventID, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + ? WHERE id = 42", d.amount)
			return err
		})
		if err != nil {
			log.Fatal(err) // not acked: the broker redelivers
		}
		var balance int64
		if err := db.QueryRowContext(ctx, "SELECT balance FROM accounts WHERE id = 42").Scan(&balance); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: applied=%v balance=%d\n", d.eventID, applied, balance)
	}
	// Output:
	// evt-1: applied=true balance=50
	// evt-2: applied=true balance=80
	// evt-1: applied=false balance=80
	// evt-2: applied=false balance=80
	// evt-3: applied=true balance=85
}

// A wallet credit of 50, delivered twice. The naive version inserts the
// key with ON CONFLICT DO NOTHING and then updates unconditionally: DO
// NOTHING suppresses the conflict instead of aborting, so the redelivery
// credits again. The inbox gates the update on the insert's row count.
func Example_wallet() {
	db, cleanup := openExampleDB()
	defer cleanup()
	ctx := context.Background()
	balance := func() (b int64) {
		if err := db.QueryRow("SELECT balance FROM accounts WHERE id = 42").Scan(&b); err != nil {
			log.Fatal(err)
		}
		_, _ = db.Exec("UPDATE accounts SET balance = 0")
		return b
	}

	// Naive: a real production bug.
	if _, err := db.Exec("CREATE TABLE processed_events (transaction_id TEXT PRIMARY KEY)"); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		tx, _ := db.BeginTx(ctx, nil)
		_, _ = tx.Exec("INSERT INTO processed_events (transaction_id) VALUES ('txn-123') ON CONFLICT DO NOTHING")
		_, _ = tx.Exec("UPDATE accounts SET balance = balance + 50 WHERE id = 42")
		if err := tx.Commit(); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("naive: balance =", balance())

	// Gated by the inbox.
	in, _ := inbox.New(db, sqldialect.SQLite, "wallet")
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		if _, err := in.Process(ctx, "txn-123", func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + 50 WHERE id = 42")
			return err
		}); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("gated: balance =", balance())
	// Output:
	// naive: balance = 100
	// gated: balance = 50
}

// ProcessBatch pays one commit for many messages; a failing message rolls
// back alone.
func ExampleInbox_ProcessBatch() {
	db, cleanup := openExampleDB()
	defer cleanup()
	ctx := context.Background()
	in, _ := inbox.New(db, sqldialect.SQLite, "account-service")
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	msgs := []inbox.Message{{Key: "evt-1", Value: 50}, {Key: "evt-2", Value: -1}, {Key: "evt-3", Value: 5}, {Key: "evt-1", Value: 50}}
	results, err := in.ProcessBatch(ctx, msgs, func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
		amount := m.Value.(int)
		if amount < 0 {
			return fmt.Errorf("negative amount %d", amount)
		}
		_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + ? WHERE id = 42", amount)
		return err
	})
	if err != nil {
		log.Fatal(err) // nothing committed: ack nothing
	}
	for _, r := range results {
		fmt.Printf("%s applied=%v err=%v\n", r.Key, r.Applied, r.Err)
	}
	// Output:
	// evt-1 applied=true err=<nil>
	// evt-2 applied=false err=inbox: handler for key "evt-2": negative amount -1
	// evt-3 applied=true err=<nil>
	// evt-1 applied=false err=<nil>
}

// ProcessBatchSet hands the batch's new messages to one set-based handler:
// here one UPDATE credits every account of the batch. The amounts are summed
// per account first, because an UPDATE … FROM a list that names one row twice
// changes that row only once.
func ExampleInbox_ProcessBatchSet() {
	db, cleanup := openExampleDB()
	defer cleanup()
	ctx := context.Background()
	if _, err := db.Exec("INSERT INTO accounts VALUES (7, 0)"); err != nil {
		log.Fatal(err)
	}
	in, _ := inbox.New(db, sqldialect.SQLite, "account-service")
	if err := in.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	type deposit struct{ account, amount int }
	credit := func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
		sums := map[int]int{}
		var order []int
		for _, m := range fresh {
			d := m.Value.(deposit)
			if _, ok := sums[d.account]; !ok {
				order = append(order, d.account)
			}
			sums[d.account] += d.amount
		}
		q := "WITH v(id, amount) AS (VALUES "
		var args []any
		for i, id := range order {
			if i > 0 {
				q += ", "
			}
			q += "(?, ?)"
			args = append(args, id, sums[id])
		}
		q += ") UPDATE accounts SET balance = balance + v.amount FROM v WHERE accounts.id = v.id"
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	}
	batch := []inbox.Message{
		{Key: "evt-1", Value: deposit{42, 50}},
		{Key: "evt-2", Value: deposit{7, 5}},
		{Key: "evt-3", Value: deposit{42, 25}},
	}
	for range 2 { // the second delivery is a redelivery of the whole batch
		results, err := in.ProcessBatchSet(ctx, batch, credit, nil)
		if err != nil {
			log.Fatal(err) // nothing committed: ack nothing
		}
		applied := 0
		for _, r := range results {
			if r.Applied {
				applied++
			}
		}
		var a42, a7 int
		_ = db.QueryRow("SELECT (SELECT balance FROM accounts WHERE id = 42), (SELECT balance FROM accounts WHERE id = 7)").Scan(&a42, &a7)
		fmt.Printf("applied %d: account 42 = %d, account 7 = %d\n", applied, a42, a7)
	}
	// Output:
	// applied 3: account 42 = 75, account 7 = 5
	// applied 0: account 42 = 75, account 7 = 5
}
