package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"

	"github.com/idem-go/idem/inbox"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/sequence"
	"github.com/idem-go/idem/sqldialect"
)

// Every strategy runs in its own namespace (a SQLite file, or a PostgreSQL
// schema) holding the same tables:
//
//	ledger(msg_id, n)          one row per applied message, n = times applied: the effect
//	accounts(account, balance) the deposits' balances, credited with the ledger row
//	naive_keys(msg_id)         the hand-written strategies' dedup keys
//	provider(msg_id, calls)    the downstream "provider" of the keystore strategies
//	idem_inbox, idem_keys, idem_marks  the inbox's, keystore's and sequence marks' tables
//
// The ledger is the ground truth: after the run, a message with no row was
// lost, and one with n > 1 was applied more than once.

const (
	driverSQLite   = "sqlite" // modernc.org/sqlite
	driverPostgres = "pgx"    // github.com/jackc/pgx/v5/stdlib
	// consumerName scopes the inbox's keys and the sequence marks.
	consumerName = "chaos"
)

// queries are the SQL statements of one namespace.
type queries struct {
	d                 sqldialect.Dialect
	prefix            string // "" (SQLite) or "schema." (PostgreSQL)
	ledgerInc, credit string
	keyInsert         string // INSERT the msg id unless present
	keySelect         string
	providerInsert    string // INSERT the msg id unless present, calls = 1
	providerRepeat    string // calls = calls + 1
	providerUpsert    string // insert or calls = calls + 1
	schema            []string
}

func newQueries(d sqldialect.Dialect, schema string) queries {
	q := queries{d: d}
	if schema != "" {
		q.prefix = schema + "."
	}
	p := d.Placeholder
	t := func(name string) string { return q.prefix + name }
	q.ledgerInc = "INSERT INTO " + t("ledger") + " AS l (msg_id, n) VALUES (" + p(1) + ", 1) ON CONFLICT (msg_id) DO UPDATE SET n = l.n + 1"
	q.credit = "UPDATE " + t("accounts") + " SET balance = balance + " + p(1) + " WHERE account = " + p(2)
	q.keyInsert = "INSERT INTO " + t("naive_keys") + " (msg_id) VALUES (" + p(1) + ") ON CONFLICT (msg_id) DO NOTHING"
	q.keySelect = "SELECT 1 FROM " + t("naive_keys") + " WHERE msg_id = " + p(1)
	q.providerInsert = "INSERT INTO " + t("provider") + " (msg_id, calls) VALUES (" + p(1) + ", 1) ON CONFLICT (msg_id) DO NOTHING"
	q.providerRepeat = "UPDATE " + t("provider") + " SET calls = calls + 1 WHERE msg_id = " + p(1)
	q.providerUpsert = "INSERT INTO " + t("provider") + " AS v (msg_id, calls) VALUES (" + p(1) + ", 1) ON CONFLICT (msg_id) DO UPDATE SET calls = v.calls + 1"
	q.schema = []string{
		"CREATE TABLE IF NOT EXISTS " + t("ledger") + " (msg_id BIGINT PRIMARY KEY, n INTEGER NOT NULL)",
		"CREATE TABLE IF NOT EXISTS " + t("accounts") + " (account INTEGER PRIMARY KEY, balance BIGINT NOT NULL)",
		"CREATE TABLE IF NOT EXISTS " + t("naive_keys") + " (msg_id BIGINT PRIMARY KEY)",
		"CREATE TABLE IF NOT EXISTS " + t("provider") + " (msg_id BIGINT PRIMARY KEY, calls INTEGER NOT NULL)",
	}
	return q
}

// table returns the qualified name of one of idem's tables.
func (q queries) table(name string) string { return q.prefix + name }

// newInbox returns the inbox of the namespace.
func (q queries) newInbox(db *sql.DB) (*inbox.Inbox, error) {
	return inbox.New(db, q.d, consumerName, inbox.WithTable(q.table("idem_inbox")))
}

// newMarks returns the sequence marks of the namespace.
func (q queries) newMarks() (*sequence.SQLMarks, error) {
	return sequence.NewSQLMarks(q.d, consumerName, sequence.WithTable(q.table("idem_marks")))
}

// sqlKeystore is what the SQL key stores have in common.
type sqlKeystore interface {
	keystore.Store
	Migrate(ctx context.Context) error
	Close() error
}

// newSQLKeystore returns the namespace's own key store, used when no
// separate key store URL is given.
func (q queries) newSQLKeystore(db *sql.DB) (sqlKeystore, error) {
	return sqlstore.New(db, q.d, sqlstore.WithTable(q.table("idem_keys")))
}

// setup creates the namespace's tables, the accounts and, for the sequence
// strategy, registers every producer.
func (q queries) setup(ctx context.Context, db *sql.DB, partitions int, withKeystore bool) error {
	for _, s := range q.schema {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("chaos: create tables: %w", err)
		}
	}
	err := withTx(ctx, db, "create accounts", func(tx *sql.Tx) error {
		for a := range accounts {
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+q.table("accounts")+" (account, balance) VALUES ("+q.d.Placeholder(1)+", 0)", a); err != nil {
				return fmt.Errorf("chaos: create accounts: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	in, err := q.newInbox(db)
	if err == nil {
		err = in.Migrate(ctx)
	}
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if withKeystore {
		ks, err := q.newSQLKeystore(db)
		if err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		err = ks.Migrate(ctx)
		ks.Close()
		if err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
	}
	return q.registerProducers(ctx, db, partitions)
}

// registerProducers applies each producer's message 0 (its registration)
// through the marks. A mark that does not exist accepts any sequence (the
// broker rule for unknown producers); without registration, a reordered
// first delivery would set the mark past its predecessors, which would then
// be skipped as "duplicates": lost.
func (q queries) registerProducers(ctx context.Context, db *sql.DB, partitions int) error {
	marks, err := q.newMarks()
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if err := marks.Migrate(ctx, db); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	return withTx(ctx, db, "register producers", func(tx *sql.Tx) error {
		for p := range partitions {
			if _, err := marks.Advance(ctx, tx, producerID(uint32(p)), 0, 0, 0); err != nil {
				return fmt.Errorf("chaos: register producer %d: %w", p, err)
			}
		}
		return nil
	})
}

// producerID maps a producer index to its sequence producer id.
func producerID(p uint32) int64 { return int64(p) + 1 }

// tally is what the ledger says after a run.
type tally struct {
	rows, applied, doubled, extra int64
	outOfRange                    int64
	balance                       []int64 // per account
	absorbed                      int64   // provider calls absorbed by its dedup
}

// check reads the ledger, the balances and the provider's call counts.
func (q queries) check(ctx context.Context, db *sql.DB, n int) (tally, error) {
	var t tally
	row := db.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(n), 0), "+
		"COALESCE(SUM(CASE WHEN n > 1 THEN 1 ELSE 0 END), 0), COALESCE(SUM(CASE WHEN n > 1 THEN n - 1 ELSE 0 END), 0), "+
		"COALESCE(SUM(CASE WHEN msg_id < 1 OR msg_id > "+strconv.Itoa(n)+" OR n < 1 THEN 1 ELSE 0 END), 0) FROM "+q.table("ledger"))
	if err := row.Scan(&t.rows, &t.applied, &t.doubled, &t.extra, &t.outOfRange); err != nil {
		return t, fmt.Errorf("chaos: read ledger: %w", err)
	}
	t.balance = make([]int64, accounts)
	rows, err := db.QueryContext(ctx, "SELECT account, balance FROM "+q.table("accounts"))
	if err != nil {
		return t, fmt.Errorf("chaos: read balances: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var a, b int64
		if err := rows.Scan(&a, &b); err != nil {
			return t, fmt.Errorf("chaos: read balances: %w", err)
		}
		if a >= 0 && a < accounts {
			t.balance[a] = b
		}
	}
	if err := rows.Err(); err != nil {
		return t, fmt.Errorf("chaos: read balances: %w", err)
	}
	err = db.QueryRowContext(ctx, "SELECT COALESCE(SUM(calls - 1), 0) FROM "+q.table("provider")).Scan(&t.absorbed)
	if err != nil {
		return t, fmt.Errorf("chaos: read provider: %w", err)
	}
	return t, nil
}
