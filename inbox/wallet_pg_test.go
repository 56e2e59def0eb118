package inbox_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/idem-go/idem/internal/testsupport/inboxtest"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/sqldialect"
)

// TestWalletCreditPostgres runs the wallet credit of 50 on PostgreSQL three
// ways, each delivered twice: the naive INSERT ... ON CONFLICT DO NOTHING
// followed by an unconditional UPDATE (double credit), one statement whose
// UPDATE runs only if its CTE inserted the key, and the inbox.
func TestWalletCreditPostgres(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	for _, q := range []string{
		"CREATE TABLE wallets (user_id int PRIMARY KEY, balance bigint NOT NULL)",
		"CREATE TABLE processed_events (transaction_id text PRIMARY KEY)",
		"INSERT INTO wallets VALUES (42, 0)",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	reset := func() int64 {
		var b int64
		if err := db.QueryRow("SELECT balance FROM wallets WHERE user_id = 42").Scan(&b); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("UPDATE wallets SET balance = 0; TRUNCATE processed_events"); err != nil {
			t.Fatal(err)
		}
		return b
	}
	twice := func(stmts ...string) {
		for range 2 {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range stmts {
				if _, err := tx.Exec(s); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}

	twice("INSERT INTO processed_events (transaction_id) VALUES ('txn-123') ON CONFLICT (transaction_id) DO NOTHING",
		"UPDATE wallets SET balance = balance + 50 WHERE user_id = 42")
	if got := reset(); got != 100 {
		t.Fatalf("naive version: balance %d, want 100 (it double-credits)", got)
	}

	twice(`WITH ins AS (
  INSERT INTO processed_events (transaction_id) VALUES ('txn-123')
  ON CONFLICT (transaction_id) DO NOTHING RETURNING transaction_id)
UPDATE wallets SET balance = balance + 50 WHERE user_id = 42 AND EXISTS (SELECT 1 FROM ins)`)
	if got := reset(); got != 50 {
		t.Fatalf("CTE gate: balance %d, want 50", got)
	}

	in := inboxtest.Migrated(t, db, sqldialect.Postgres, "wallet")
	for range 2 {
		if _, err := in.Process(ctx, "txn-123", func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE wallets SET balance = balance + 50 WHERE user_id = 42")
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if got := reset(); got != 50 {
		t.Fatalf("inbox: balance %d, want 50", got)
	}
}
