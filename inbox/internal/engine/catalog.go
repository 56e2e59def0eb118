package engine

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/idem-go/idem/sqldialect"
)

// Querier is a *sql.Tx (or a *sql.DB) for reads.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// SplitTable splits schema.table.
func SplitTable(t string) (schema, name string) {
	if i := strings.LastIndexByte(t, '.'); i >= 0 {
		return t[:i], t[i+1:]
	}
	return "", t
}

// TableRef is how an ON CONFLICT clause names the existing row: the
// table's own name, without its schema.
func TableRef(name string) string {
	_, n := SplitTable(name)
	return n
}

// MySQLSchemaArg is the schema part of t as a bind argument: nil for the
// connection's database.
func MySQLSchemaArg(t string) (any, string) {
	schema, name := SplitTable(t)
	if schema == "" {
		return nil, name
	}
	return schema, name
}

// TableExists reports whether the named table exists.
func TableExists(ctx context.Context, q Querier, d sqldialect.Dialect, name string) (bool, error) {
	var n int
	var err error
	switch d {
	case sqldialect.Postgres:
		err = q.QueryRowContext(ctx, `SELECT count(*) FROM pg_class WHERE oid = to_regclass($1::text)`, name).Scan(&n)
	case sqldialect.SQLite:
		err = q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, name).Scan(&n)
	case sqldialect.MySQL:
		schema, name := MySQLSchemaArg(name)
		err = q.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?`, schema, name).Scan(&n)
	default:
		return false, nil
	}
	return n > 0, err
}

// SQLiteNowMS is SQLite's clock in Unix milliseconds. It is evaluated by
// SQLite, so every writer of one file uses the same clock.
const SQLiteNowMS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"

// MySQLNowUS is MySQL's clock in Unix microseconds, independent of the
// session's time zone.
const MySQLNowUS = `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))`

// DBNowUS is the database clock in Unix microseconds.
func DBNowUS(d sqldialect.Dialect) string {
	switch d {
	case sqldialect.Postgres:
		return `(extract(epoch FROM clock_timestamp()) * 1000000)::bigint`
	case sqldialect.MySQL:
		return MySQLNowUS
	}
	return `(` + SQLiteNowMS + ` * 1000)`
}

// The frozen rows table: MigrateLayout installs a trigger on the rows
// table that refuses every insert, with these codes.
const (
	// FrozenState is the SQLSTATE (PostgreSQL) the trigger raises.
	FrozenState = "IDM01"
	// MySQLFrozenErrno is the error number it raises on MySQL (outside
	// the server's own ranges).
	MySQLFrozenErrno = 31401
)

// FrozenName is the name of the trigger (and PostgreSQL function) that
// freezes the rows table t.
func FrozenName(t string) string { return TableRef(t) + "_frozen" }

// IsFrozen reports whether err is the frozen rows table's refusal.
func IsFrozen(d sqldialect.Dialect, err error) bool {
	switch d {
	case sqldialect.Postgres:
		var e interface{ SQLState() string }
		return errors.As(err, &e) && e.SQLState() == FrozenState
	case sqldialect.SQLite:
		var e interface{ Code() int }
		return errors.As(err, &e) && e.Code() == 1811 // SQLITE_CONSTRAINT_TRIGGER
	case sqldialect.MySQL:
		return sqldialect.MySQLErrorNumber(err) == MySQLFrozenErrno
	}
	return false
}
