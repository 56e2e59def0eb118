package sqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// ErrWrongDialect is matched (errors.Is) by a [*MismatchError]: the
// database is not of the dialect the caller was built with.
var ErrWrongDialect = errors.New("sqldialect: wrong dialect for this database")

// RowQuerier runs a query returning at most one row: *sql.DB, *sql.Conn
// and *sql.Tx implement it.
type RowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Detect asks the server behind q which family it belongs to: SELECT
// version() answers "PostgreSQL 15.4 …" on PostgreSQL and "8.0.36" or
// "10.11.6-MariaDB" on MySQL and MariaDB; SQLite has no version() but
// answers SELECT sqlite_version(). It returns an error when neither
// answers, or the answer names another product (CockroachDB, a proxy).
//
// It only reads; on PostgreSQL the first query succeeds, so a transaction
// passed as q is never left aborted by it.
func Detect(ctx context.Context, q RowQuerier) (Dialect, error) {
	var v string
	err := q.QueryRowContext(ctx, `SELECT version()`).Scan(&v)
	if err == nil {
		switch {
		case strings.HasPrefix(v, "PostgreSQL "):
			return Postgres, nil
		case v != "" && v[0] >= '0' && v[0] <= '9': // MySQL and MariaDB start with the number
			return MySQL, nil
		}
		return 0, fmt.Errorf("sqldialect: unknown server version %q", v)
	}
	if err2 := q.QueryRowContext(ctx, `SELECT sqlite_version()`).Scan(&v); err2 == nil {
		return SQLite, nil
	}
	return 0, fmt.Errorf("sqldialect: detect the database: %w", err)
}

// MismatchError says that the database is not of the dialect a component
// was built with. It matches [ErrWrongDialect] with errors.Is and unwraps
// to the error of the statement that revealed it.
type MismatchError struct {
	Database  Dialect // what the server is
	Dialect   Dialect // what the component was built with
	Component string  // who was built with it: "the inbox", "the key store"
	Err       error   // the failed statement's error, or nil
}

// Error names both dialects and the constant to pass instead.
func (e *MismatchError) Error() string {
	s := fmt.Sprintf("the database is %s but %s was built with sqldialect.%s: pass sqldialect.%s", e.Database.product(), e.Component, e.Dialect.constName(), e.Database.constName())
	if e.Err != nil {
		s += " (the statement failed with: " + e.Err.Error() + ")"
	}
	return s
}

// Is reports whether target is [ErrWrongDialect].
func (e *MismatchError) Is(target error) bool { return target == ErrWrongDialect }

// Unwrap returns the failed statement's error.
func (e *MismatchError) Unwrap() error { return e.Err }

// Mismatch explains a failed statement: when the server behind q (asked
// with [Detect]) is not of dialect d, it returns a [*MismatchError] naming
// component and wrapping cause; otherwise, or when the server cannot be
// told, it returns nil and the caller keeps its own error. Call it on an
// error path only: it runs one or two queries. It returns nil at once when
// ctx is done or cause is a context error.
func (d Dialect) Mismatch(ctx context.Context, q RowQuerier, component string, cause error) error {
	if ctx.Err() != nil || errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded) {
		return nil
	}
	got, err := Detect(ctx, q)
	if err != nil || got == d {
		return nil
	}
	return &MismatchError{Database: got, Dialect: d, Component: component, Err: cause}
}

// product is the database's name as its vendor writes it.
func (d Dialect) product() string {
	switch d {
	case Postgres:
		return "PostgreSQL"
	case SQLite:
		return "SQLite"
	case MySQL:
		return "MySQL or MariaDB"
	}
	return d.String()
}

// constName is the name of d's constant in this package.
func (d Dialect) constName() string {
	switch d {
	case Postgres:
		return "Postgres"
	case SQLite:
		return "SQLite"
	case MySQL:
		return "MySQL"
	}
	return d.String()
}
