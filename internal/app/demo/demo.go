// Package demo runs the inbox's worked examples on an embedded SQLite
// database and prints a short report. It backs `idem demo`.
package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/internal/together"
	"github.com/idem-go/idem/sqldialect"
	_ "modernc.org/sqlite" // embedded default
)

// Report is what Run measured, for tests and callers that want numbers.
type Report struct {
	AccountLines  []string
	NaiveBalance  int64
	GatedBalance  int64
	RaceApplied   int
	RaceBalance   int64
	RaceDelivered int
}

// RunTemp runs the scenarios on a SQLite file in a new temporary directory,
// removed afterwards unless keep is set, and fails if a duplicate applied
// twice: it is `idem demo`.
func RunTemp(ctx context.Context, keep bool, w io.Writer) error {
	dir, err := os.MkdirTemp("", "idem-demo-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	r, err := Run(ctx, dir, w)
	if err != nil {
		return err
	}
	if r.RaceApplied != 1 || r.GatedBalance != 50 {
		return fmt.Errorf("demo: effectively-once violated: %+v", r)
	}
	return nil
}

// Run executes the scenarios on a SQLite file in dir and writes the report
// to w.
func Run(ctx context.Context, dir string, w io.Writer) (*Report, error) {
	path := filepath.Join(dir, "demo.db")
	db, err := sql.Open("sqlite", sqldialect.SQLiteDSN(path))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	r := &Report{}
	fmt.Fprintf(w, "idem demo: the inbox's worked examples on an embedded SQLite database (%s)\n\n", path)

	fmt.Fprintln(w, "1. Account: five deliveries, two of them duplicates")
	if err := account(ctx, db, w, r); err != nil {
		return nil, fmt.Errorf("account: %w", err)
	}
	fmt.Fprintln(w, "\n2. Wallet credit of 50, delivered twice")
	if err := wallet(ctx, db, w, r); err != nil {
		return nil, fmt.Errorf("wallet: %w", err)
	}
	fmt.Fprintln(w, "\n3. 32 concurrent deliveries of one key, from two connection pools (two consumers)")
	if err := race(ctx, path, db, w, r); err != nil {
		return nil, fmt.Errorf("race: %w", err)
	}
	return r, nil
}

func exec(ctx context.Context, db *sql.DB, stmts ...string) error {
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

func balanceOf(ctx context.Context, db *sql.DB, id int) (int64, error) {
	var b int64
	err := db.QueryRowContext(ctx, "SELECT balance FROM accounts WHERE id = ?", id).Scan(&b)
	return b, err
}

func credit(id int, amount int64) inbox.Handler {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + ? WHERE id = ?", amount, id)
		return err
	}
}

func account(ctx context.Context, db *sql.DB, w io.Writer, r *Report) error {
	if err := exec(ctx, db, "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)",
		"INSERT INTO accounts VALUES (1, 0), (2, 0), (3, 0)"); err != nil {
		return err
	}
	in, err := inbox.New(db, sqldialect.SQLite, "account")
	if err != nil {
		return err
	}
	if err := in.Migrate(ctx); err != nil {
		return err
	}
	deliveries := []struct {
		id     string
		amount int64
	}{{"evt-1", 50}, {"evt-2", 30}, {"evt-1", 50}, {"evt-2", 30}, {"evt-3", 5}}
	for _, d := range deliveries {
		applied, err := in.Process(ctx, d.id, credit(1, d.amount))
		if err != nil {
			return err
		}
		b, err := balanceOf(ctx, db, 1)
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s: applied=%v balance=%d", d.id, applied, b)
		r.AccountLines = append(r.AccountLines, line)
		fmt.Fprintln(w, line)
	}
	return nil
}

func wallet(ctx context.Context, db *sql.DB, w io.Writer, r *Report) error {
	if err := exec(ctx, db, "CREATE TABLE processed_events (transaction_id TEXT PRIMARY KEY)"); err != nil {
		return err
	}
	for range 2 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		// DO NOTHING suppresses the conflict instead of aborting, so the
		// unconditional UPDATE runs on the redelivery too.
		if _, err := tx.ExecContext(ctx, "INSERT INTO processed_events VALUES ('txn-123') ON CONFLICT DO NOTHING"); err != nil {
			tx.Rollback()
			return err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + 50 WHERE id = 2"); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	var err error
	if r.NaiveBalance, err = balanceOf(ctx, db, 2); err != nil {
		return err
	}
	if err := exec(ctx, db, "UPDATE accounts SET balance = 0 WHERE id = 2"); err != nil {
		return err
	}
	in, err := inbox.New(db, sqldialect.SQLite, "wallet")
	if err != nil {
		return err
	}
	for range 2 {
		if _, err := in.Process(ctx, "txn-123", credit(2, 50)); err != nil {
			return err
		}
	}
	if r.GatedBalance, err = balanceOf(ctx, db, 2); err != nil {
		return err
	}
	fmt.Fprintf(w, "   naive  (INSERT ... ON CONFLICT DO NOTHING, then UPDATE): balance = %d  <- double credit\n", r.NaiveBalance)
	fmt.Fprintf(w, "   inbox  (the insert's row count gates the UPDATE):        balance = %d\n", r.GatedBalance)
	return nil
}

func race(ctx context.Context, path string, db *sql.DB, w io.Writer, r *Report) error {
	db2, err := sql.Open("sqlite", sqldialect.SQLiteDSN(path))
	if err != nil {
		return err
	}
	defer db2.Close()
	const n = 32
	inboxes := make([]*inbox.Inbox, 2)
	for i, pool := range []*sql.DB{db, db2} {
		if inboxes[i], err = inbox.New(pool, sqldialect.SQLite, "race"); err != nil {
			return err
		}
	}
	applied, err := Race(n, func(i int) (bool, error) {
		return inboxes[i%2].Process(ctx, "evt-race", credit(3, 50))
	})
	if err != nil {
		return err
	}
	r.RaceDelivered, r.RaceApplied = n, applied
	if r.RaceBalance, err = balanceOf(ctx, db, 3); err != nil {
		return err
	}
	fmt.Fprintf(w, "   delivered %d times: applied %d, duplicates %d, balance = %d\n", n, r.RaceApplied, n-r.RaceApplied, r.RaceBalance)
	return nil
}

// Race delivers one message n times at once: deliver(i) for i in [0, n),
// each on its own goroutine, all released together. It returns how many
// deliveries reported applied, and every delivery's error joined. It is the
// demo's race, and the inbox tests' too.
func Race(n int, deliver func(i int) (applied bool, err error)) (int, error) {
	var applied atomic.Int32
	errs := make([]error, n)
	together.Run(n, func(i int) {
		ok, err := deliver(i)
		if ok {
			applied.Add(1)
		}
		errs[i] = err
	})
	return int(applied.Load()), errors.Join(errs...)
}
