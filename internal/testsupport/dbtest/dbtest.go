// Package dbtest names the databases that idem's SQL tests run on, each
// opened fresh per test by internal/testsupport/testenv, so that every package tests
// the same dialects and driver settings, and opens the key stores (SQLite,
// memory) the tests share.
package dbtest

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore/memstore"
	"github.com/idem-go/idem/keystore/sqlitestore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/sqldialect"
)

// DB is one database a test runs on.
type DB struct {
	Name string
	D    sqldialect.Dialect
	Open func(testing.TB) *sql.DB
}

// The databases. MySQLFoundRows is MariaDB under the driver's
// clientFoundRows=true, which reports a found, unchanged row as 1 affected
// row, like an insert: a statement that decides by the affected-row count
// must still tell the two apart (issue 13 case 11).
var (
	SQLite         = DB{"sqlite", sqldialect.SQLite, testenv.SQLite}
	Postgres       = DB{"postgres", sqldialect.Postgres, testenv.Postgres}
	MySQL          = DB{"mysql", sqldialect.MySQL, testenv.MySQL}
	MySQLFoundRows = DB{"mysql-clientFoundRows", sqldialect.MySQL, func(t testing.TB) *sql.DB { return testenv.MySQLWith(t, "clientFoundRows=true") }}
)

// All is every dialect, with each driver setting that changes what a
// statement reports.
var All = []DB{SQLite, Postgres, MySQL, MySQLFoundRows}

// SQLiteStore opens the SQLite key store at path as idem serve does
// (sqlitestore.Open) and migrates it; an empty path is a fresh file in the
// test's temporary directory. The store is closed when the test ends. The
// test binary must register the modernc.org/sqlite driver.
func SQLiteStore(t testing.TB, path string, opts ...sqlstore.Option) *sqlitestore.Store {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "keys.db")
	}
	s, err := sqlitestore.Open(path, opts...)
	if err == nil {
		t.Cleanup(func() { s.Close() })
		err = s.Migrate(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// MemStore returns a new in-memory key store with the real clock, closed
// when the test ends.
func MemStore(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Strings runs q, a query of one text column, and returns its rows; any
// error fails the test.
func Strings(t testing.TB, db *sql.DB, q string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
