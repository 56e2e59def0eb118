// Package ddl runs idem's schema statements so that several processes may
// run them at once, as the replicas of a service do when they start
// together and each calls Migrate. On PostgreSQL two concurrent CREATE … IF
// NOT EXISTS of one name can both pass the existence check, and the second
// then fails (a unique violation on the catalog, duplicate_table or
// duplicate_object) instead of finding the object; so each schema change
// takes a transaction-scoped advisory lock named after the table it is
// about first, and the second waits for the first to commit and then finds
// what it made. The lock is per table, so that a long change of one table
// (sqlstore's MigrateLayout copies every row) does not hold up another's
// (an inbox creating its next bucket). MySQL and SQLite serialize such
// statements themselves.
package ddl

import (
	"context"
	"database/sql"
	"errors"

	"github.com/idem-go/idem/sqldialect"
)

// Lock takes, in tx on PostgreSQL, the schema lock of the table named
// table (as the caller names it, schema included if any); it is held until
// tx ends. On other databases it does nothing.
func Lock(ctx context.Context, tx sqldialect.Execer, d sqldialect.Dialect, table string) error {
	if d != sqldialect.Postgres {
		return nil
	}
	_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "idem ddl "+table)
	return err
}

// Exec runs stmts, the schema of table, on db in order. On PostgreSQL they
// run in one transaction after [Lock]: a transaction of their own when db
// can begin one (a *sql.DB or *sql.Conn), db's when it is a *sql.Tx (the
// lock is then held until the caller's transaction ends). On other
// databases they run one by one on db. The first error is returned as it
// is, with the statements before it rolled back on PostgreSQL.
func Exec(ctx context.Context, db sqldialect.Execer, d sqldialect.Dialect, table string, stmts []string) error {
	if d != sqldialect.Postgres {
		return execAll(ctx, db, stmts)
	}
	b, ok := db.(interface {
		BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
	})
	if !ok {
		if err := Lock(ctx, db, d, table); err != nil {
			return err
		}
		return execAll(ctx, db, stmts)
	}
	tx, err := b.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // no-op after Commit
	if err := Lock(ctx, tx, d, table); err != nil {
		return err
	}
	if err := execAll(ctx, tx, stmts); err != nil {
		return err
	}
	return tx.Commit()
}

func execAll(ctx context.Context, db sqldialect.Execer, stmts []string) error {
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// LostCreateRace reports whether err is what PostgreSQL answers the loser
// of two concurrent CREATE … IF NOT EXISTS of one name that did not both
// take [Lock] (a process of a release before the lock, during a rolling
// upgrade): a unique violation on the catalog's index (23505),
// duplicate_table (42P07) or duplicate_object (42710), depending on where
// the statement met the winner's catalog rows. The object exists.
func LostCreateRace(d sqldialect.Dialect, err error) bool {
	if d != sqldialect.Postgres {
		return false
	}
	var e interface{ SQLState() string }
	if !errors.As(err, &e) {
		return false
	}
	switch e.SQLState() {
	case "23505", "42P07", "42710":
		return true
	}
	return false
}
