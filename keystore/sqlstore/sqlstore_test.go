package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testsupport/testenv"
	"github.com/idem-go/idem/keystore"
	"github.com/idem-go/idem/keystore/sqlstore"
	"github.com/idem-go/idem/keystore/storetest"
	"github.com/idem-go/idem/sqldialect"
)

// dialects are the databases the store runs on, each with a fresh database
// per call and a table name that only that dialect refuses.
var dialects = []struct {
	d        sqldialect.Dialect
	open     func(testing.TB) *sql.DB
	badTable string
}{
	{sqldialect.Postgres, testenv.Postgres, "a.b.c"},
	{sqldialect.SQLite, testenv.SQLite, "main.keys"},
}

// eachDialect runs f as a subtest per dialect.
func eachDialect(t *testing.T, f func(t *testing.T, d sqldialect.Dialect, db *sql.DB)) {
	for _, dc := range dialects {
		t.Run(dc.d.String(), func(t *testing.T) { f(t, dc.d, dc.open(t)) })
	}
}

// newStore returns a migrated store on db, closed with the test.
func newStore(t testing.TB, db *sql.DB, d sqldialect.Dialect, opts ...sqlstore.Option) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.New(db, d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	for _, dc := range dialects {
		t.Run(dc.d.String(), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) keystore.Store { return newStore(t, dc.open(t), dc.d) })
		})
	}
}

func TestOptions(t *testing.T) {
	for _, dc := range dialects {
		t.Run(dc.d.String(), func(t *testing.T) {
			db := dc.open(t)
			for _, o := range []sqlstore.Option{
				sqlstore.WithTable("bad-name"), sqlstore.WithTable(dc.badTable), sqlstore.WithTable(""), nil,
				sqlstore.WithScope(""), sqlstore.WithScope("{x}"), sqlstore.WithMaxResultSize(-1),
			} {
				if _, err := sqlstore.New(db, dc.d, o); !errors.Is(err, idem.ErrInvalidOption) {
					t.Errorf("New: %v, want ErrInvalidOption", err)
				}
			}
			if _, err := sqlstore.New(nil, dc.d); !errors.Is(err, idem.ErrInvalidOption) {
				t.Errorf("New(nil): %v, want ErrInvalidOption", err)
			}
		})
	}
	if _, err := sqlstore.New(testenv.SQLite(t), sqldialect.MySQL); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("New on MySQL: %v, want ErrInvalidOption", err)
	}
}

// Migrate concurrently, on a custom table (schema-qualified on
// PostgreSQL).
func TestMigrate(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqldialect.Dialect, db *sql.DB) {
		ctx := context.Background()
		table := "custom_keys"
		if d == sqldialect.Postgres {
			var schema string
			if err := db.QueryRow("SELECT current_schema()").Scan(&schema); err != nil {
				t.Fatal(err)
			}
			table = schema + "." + table
		}
		s, err := sqlstore.New(db, d, sqlstore.WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 4)
		for range 4 {
			go func() { errs <- s.Migrate(ctx) }()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Fatalf("concurrent Migrate: %v", err)
			}
		}
		c, err := s.Reserve(ctx, "k", nil, keystore.DefaultLease)
		if err != nil || c.State != keystore.Acquired {
			t.Fatalf("Reserve on %s: %+v %v", table, c, err)
		}
		if len(s.SchemaSQL()) == 0 {
			t.Fatal("no schema SQL")
		}
	})
}
