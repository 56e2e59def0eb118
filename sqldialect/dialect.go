// Package sqldialect names the SQL databases idem's SQL-backed packages
// support, and holds what differs between them that is not a query: bind
// placeholders, identifier rules, which errors mean "run the transaction
// again", and the connection settings idem expects for SQLite.
//
// It imports no database driver. Errors are classified by the methods the
// drivers' error types expose (pgx's SQLState, modernc.org/sqlite's Code) or,
// for go-sql-driver/mysql, by its exported error number, so linking idem never
// registers a driver you did not ask for.
package sqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// Dialect is a SQL database family. The zero value is not a dialect: every
// constructor that takes one rejects it with an error wrapping
// [ErrUnknownDialect].
type Dialect int

// The supported dialects.
const (
	// Postgres is PostgreSQL (tested on 15), through pgx's database/sql
	// driver ("pgx") or any driver whose errors expose SQLState() string.
	Postgres Dialect = iota + 1
	// SQLite is SQLite 3.35 or newer, through modernc.org/sqlite ("sqlite").
	// Open it with [SQLiteDSN] for WAL, a busy timeout and BEGIN IMMEDIATE.
	SQLite
	// MySQL is MySQL 8 or MariaDB 10.6 and newer, through
	// github.com/go-sql-driver/mysql ("mysql").
	MySQL
)

// ErrUnknownDialect is wrapped by every error about a dialect idem does not
// know.
var ErrUnknownDialect = errors.New("sqldialect: unknown dialect")

// ErrInvalidIdentifier is wrapped when a table or schema name is not a plain
// SQL identifier.
var ErrInvalidIdentifier = errors.New("sqldialect: invalid identifier")

// Parse maps a driver or database name to its dialect: "postgres",
// "postgresql", "pgx"; "sqlite", "sqlite3"; "mysql", "mariadb".
func Parse(name string) (Dialect, error) {
	switch strings.ToLower(name) {
	case "postgres", "postgresql", "pgx", "pg":
		return Postgres, nil
	case "sqlite", "sqlite3":
		return SQLite, nil
	case "mysql", "mariadb":
		return MySQL, nil
	}
	return 0, fmt.Errorf("%w %q (want postgres, sqlite or mysql)", ErrUnknownDialect, name)
}

// String returns the dialect's name.
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	case MySQL:
		return "mysql"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

// Validate returns nil for a supported dialect and an error wrapping
// [ErrUnknownDialect] otherwise.
func (d Dialect) Validate() error {
	switch d {
	case Postgres, SQLite, MySQL:
		return nil
	}
	return fmt.Errorf("%w: %v", ErrUnknownDialect, d)
}

// Placeholder returns the bind placeholder for the n-th argument (1-based):
// $n for PostgreSQL, ? otherwise.
func (d Dialect) Placeholder(n int) string {
	if d == Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// Placeholders returns the placeholders for arguments from..from+count-1,
// comma separated.
func (d Dialect) Placeholders(from, count int) string {
	var b strings.Builder
	for i := 0; i < count; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(d.Placeholder(from + i))
	}
	return b.String()
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidateIdentifier accepts a plain identifier, or schema.name for
// PostgreSQL and MySQL: letters, digits and underscores, not starting with a
// digit, at most 63 bytes a part. idem builds table names into SQL text, so
// anything else is rejected rather than quoted.
func (d Dialect) ValidateIdentifier(name string) error {
	parts := strings.Split(name, ".")
	if len(parts) > 2 || (len(parts) == 2 && d == SQLite) {
		return fmt.Errorf("%w: %q: too many dots", ErrInvalidIdentifier, name)
	}
	for _, p := range parts {
		if !identRE.MatchString(p) {
			return fmt.Errorf("%w: %q: want letters, digits and _, not starting with a digit, at most 63 bytes", ErrInvalidIdentifier, name)
		}
	}
	return nil
}

// Retryable reports whether err means the whole transaction may be run again
// and succeed: a serialization failure or deadlock (PostgreSQL 40001, 40P01),
// a busy or locked database (SQLite SQLITE_BUSY, SQLITE_LOCKED), or a deadlock
// or lock wait timeout (MySQL 1213, 1205, MariaDB 1020). It never says yes to
// an error whose transaction might have committed.
func (d Dialect) Retryable(err error) bool {
	if err == nil {
		return false
	}
	switch d {
	case Postgres:
		switch sqlState(err) {
		case "40001", "40P01":
			return true
		}
	case SQLite:
		switch sqliteCode(err) & 0xff {
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED and their extended codes
			return true
		}
	case MySQL:
		switch mysqlErrorNumber(err) {
		case 1213, 1205, 1020:
			return true
		}
	}
	return false
}

// IsUniqueViolation reports whether err is a unique or primary-key
// violation: PostgreSQL 23505, SQLite SQLITE_CONSTRAINT_PRIMARYKEY or
// SQLITE_CONSTRAINT_UNIQUE, MySQL 1062.
func (d Dialect) IsUniqueViolation(err error) bool {
	if err == nil {
		return false
	}
	switch d {
	case Postgres:
		return sqlState(err) == "23505"
	case SQLite:
		code := sqliteCode(err)
		return code == 1555 || code == 2067
	case MySQL:
		return mysqlErrorNumber(err) == 1062
	}
	return false
}

// MySQLErrorNumber returns the error number of the go-sql-driver/mysql
// error in err's chain (1062 for a duplicate key, 1146 for a missing
// table), or 0 when there is none.
func MySQLErrorNumber(err error) uint16 { return mysqlErrorNumber(err) }

// mysqlErrorNumber finds a *mysql.MySQLError in err's chain and returns its
// exported Number field, or 0. It reads the field by reflection so that this
// package does not import (and so register) the MySQL driver.
func mysqlErrorNumber(err error) uint16 {
	for _, e := range unwrapAll(err) {
		v := reflect.ValueOf(e)
		if v.Kind() != reflect.Pointer || v.IsNil() {
			continue
		}
		v = v.Elem()
		t := v.Type()
		if t.Kind() != reflect.Struct || t.Name() != "MySQLError" || t.PkgPath() != "github.com/go-sql-driver/mysql" {
			continue
		}
		if f := v.FieldByName("Number"); f.IsValid() && f.Kind() == reflect.Uint16 {
			return uint16(f.Uint())
		}
	}
	return 0
}

// sqlState is the SQLSTATE of the first error in err's chain that has one
// (pgx's, or any PostgreSQL driver's exposing SQLState() string), or "".
func sqlState(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}

// sqliteCode is the extended result code of the first error in err's chain
// that has one (a SQLite driver's exposing Code() int), or 0 (SQLITE_OK).
func sqliteCode(err error) int {
	var e interface{ Code() int }
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

// unwrapAll lists err and every error it wraps, depth first.
func unwrapAll(err error) []error {
	var out []error
	stack := []error{err}
	for len(stack) > 0 && len(out) < 64 {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if e == nil {
			continue
		}
		out = append(out, e)
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			stack = append(stack, u.Unwrap())
		case interface{ Unwrap() []error }:
			stack = append(stack, u.Unwrap()...)
		}
	}
	return out
}

// SQLiteDSN returns a modernc.org/sqlite data source name for path with the
// settings idem expects: WAL journal, synchronous=NORMAL (durable across a
// process crash; the last transactions may be lost on power loss, as
// SQLite documents), a 5 s busy timeout, foreign keys on, and BEGIN IMMEDIATE
// for every transaction so that writers queue on the busy timeout instead of
// failing to upgrade a read lock.
func SQLiteDSN(path string) string {
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)&_txlock=immediate"
}

// Execer runs a statement: *sql.DB, *sql.Conn and *sql.Tx implement it. It is
// what every Migrate in idem takes, and what writes inside a caller's
// transaction (an outbox Add, a version gate) take.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}
